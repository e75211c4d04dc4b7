"""``length_extrapolation``: a synthetic task (:mod:`.synthetic`) as language modelling, for
a decoder-only model (``entmax_transformer_lm``), generated from ``--data-seed`` on the fly:
nothing to download or prepare.

Each example is one sequence, ``<s> prompt = answer </s>``; the loss is on the answer and
its end only (the prompt is random, so predicting it teaches nothing), which fairseq's
``cross_entropy`` criterion does by ignoring the padding index in the targets.  Training
prompts have a length drawn uniformly from ``--min-length`` to ``--max-length``, a new
draw every epoch (``--train-examples`` a epoch); ``valid`` has ``--valid-examples`` at
``--valid-factor`` times ``--max-length`` (the length tuning may read), and ``test<F>x``
(one split per factor of ``--test-factors``) ``--test-examples`` at F times it.  Every
split's draw depends on the data seed and the split alone (fairseq's ``--seed`` draws
the model's initialisation and the batches: runs of several seeds meet the same test
sets).  :func:`exact_match` scores a split by greedy decoding of the answers.
"""

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task

from . import synthetic

# Between a prompt and its answer.
ANSWER = "="


@dataclass
class LengthExtrapolationConfig(FairseqDataclass):
    synthetic_task: str = field(default="reverse", metadata={
        "help": f"the task, one of {', '.join(synthetic.TASKS)}"})
    min_length: int = field(default=32, metadata={"help": "shortest training prompt"})
    max_length: int = field(default=64, metadata={"help": "longest training prompt"})
    train_examples: int = field(default=10000, metadata={"help": "training examples an epoch, drawn anew each epoch"})
    valid_examples: int = field(default=1000, metadata={"help": "examples of the valid split"})
    valid_factor: float = field(default=1.5, metadata={
        "help": "the valid split's prompts are this many times --max-length (tuning reads this length only)"})
    test_factors: str = field(default="1,2,4,8,16", metadata={
        "help": "one test split per factor, test<F>x, its prompts F times --max-length"})
    test_examples: int = field(default=1000, metadata={"help": "examples of each test split"})
    data_seed: int = field(default=1, metadata={
        "help": "the draws of every split depend on it and the split alone (not on --seed, which draws the model)"})
    # What fairseq's language models read from their task: the positions a model serves.
    tokens_per_sample: int = field(default=4096, metadata={
        "help": "the longest sequence (prompt and answer) the model's positions serve"})
    max_target_positions: Optional[int] = field(default=None, metadata={
        "help": "the decoder's positions (default: --tokens-per-sample)"})


def check(cfg):
    """Refuse options that cannot make a task, naming them."""
    if cfg.synthetic_task not in synthetic.TASKS:
        raise ValueError(f"--synthetic-task {cfg.synthetic_task!r}: one of {', '.join(synthetic.TASKS)}")
    if not 1 <= cfg.min_length <= cfg.max_length:
        raise ValueError(f"--min-length {cfg.min_length} and --max-length {cfg.max_length}: need "
                         "1 <= min-length <= max-length")
    for option in ("train_examples", "valid_examples", "test_examples"):
        if getattr(cfg, option) < 1:
            raise ValueError(f"--{option.replace('_', '-')} {getattr(cfg, option)}: at least 1")
    if not cfg.valid_factor > 0:
        raise ValueError(f"--valid-factor {cfg.valid_factor}: must be positive")
    test_factors(cfg)


def test_factors(cfg):
    """The factors of ``--test-factors``, as numbers."""
    try:
        factors = [float(f) for f in str(cfg.test_factors).split(",") if f.strip()]
    except ValueError:
        raise ValueError(f"--test-factors {cfg.test_factors!r}: comma-separated numbers, such as 1,2,4") from None
    if not factors or any(f <= 0 for f in factors):
        raise ValueError(f"--test-factors {cfg.test_factors!r}: positive numbers, at least one")
    return factors


def split_name(factor):
    return f"test{factor:g}x"


class SyntheticDataset(FairseqDataset):
    """Examples ``(prompt, answer)`` as (input, target) token sequences of a language model:
    input ``</s> prompt = answer``, target ``prompt = answer </s>`` with the prompt's and
    ``=``'s targets set to padding, so that only the answer and its end are scored."""

    def __init__(self, examples, dictionary, shuffle):
        self.dictionary = dictionary
        self.examples = examples
        self.shuffle = shuffle
        self.tokens = [self.encode(prompt, answer) for prompt, answer in examples]
        self.sizes = np.array([len(t) for t in self.tokens])

    def encode(self, prompt, answer):
        return torch.tensor([self.dictionary.eos()] + [self.dictionary.index(w) for w in [*prompt, ANSWER, *answer]]
                            + [self.dictionary.eos()])

    def __getitem__(self, index):
        tokens = self.tokens[index]
        target = tokens[1:].clone()
        target[:len(self.examples[index][0]) + 1] = self.dictionary.pad()
        return {"id": index, "source": tokens[:-1], "target": target}

    def __len__(self):
        return len(self.examples)

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        order = np.random.permutation(len(self)) if self.shuffle else np.arange(len(self))
        return order[np.argsort(self.sizes[order], kind="mergesort")]

    def collater(self, samples):
        if not samples:
            return {}
        pad = self.dictionary.pad()
        width = max(len(s["source"]) for s in samples)
        source = torch.full((len(samples), width), pad, dtype=torch.long)
        target = torch.full((len(samples), width), pad, dtype=torch.long)
        for i, s in enumerate(samples):
            source[i, :len(s["source"])] = s["source"]
            target[i, :len(s["target"])] = s["target"]
        return {"id": torch.tensor([s["id"] for s in samples]), "nsentences": len(samples),
                "ntokens": int((target != pad).sum()),
                "net_input": {"src_tokens": source, "src_lengths": torch.tensor([len(s["source"]) for s in samples])},
                "target": target}


@register_task("length_extrapolation", dataclass=LengthExtrapolationConfig)
class LengthExtrapolationTask(FairseqTask):
    cfg: LengthExtrapolationConfig

    def __init__(self, cfg, dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        check(cfg)
        dictionary = Dictionary()
        for word in [ANSWER, *synthetic.words(cfg.synthetic_task)]:
            dictionary.add_symbol(word)
        dictionary.finalize(padding_factor=8)
        return cls(cfg, dictionary)

    def splits(self):
        """{split: prompt length factor or None (training)} of every split the task makes."""
        return {"train": None, "valid": self.cfg.valid_factor,
                **{split_name(f): f for f in test_factors(self.cfg)}}

    def examples(self, split, epoch=1):
        """The (prompt, answer) pairs of ``split``, from the data seed, the split and (training) the epoch."""
        factors = self.splits()
        if split not in factors:
            raise ValueError(f"length_extrapolation: no split {split!r}; the splits are {', '.join(factors)}")
        names = list(factors)
        stream = [self.cfg.data_seed, names.index(split), epoch if split == "train" else 0]
        rng = np.random.default_rng(stream)
        generate = synthetic.TASKS[self.cfg.synthetic_task]
        if split == "train":
            lengths = rng.integers(self.cfg.min_length, self.cfg.max_length + 1, self.cfg.train_examples)
        else:
            count = self.cfg.valid_examples if split == "valid" else self.cfg.test_examples
            lengths = np.full(count, max(1, round(factors[split] * self.cfg.max_length)))
        return [generate(rng, int(n)) for n in lengths]

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        self.datasets[split] = SyntheticDataset(self.examples(split, epoch), self.dictionary, shuffle=split == "train")

    def has_sharded_data(self, split):
        return split == "train"  # a new draw every epoch: fairseq reloads the split each epoch

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary

    def max_positions(self):
        return None


# Positions (rows x length^2 x heads) whose scores one scoring batch may hold at once.
SCORE_BUDGET = 1 << 25


@torch.no_grad()
def exact_match(model, task, split, batch_size=100):
    """The share (in %) of ``split``'s examples whose answer greedy decoding gets exactly
    right: from ``</s> prompt =``, the most probable next token, as many as the answer has.

    Computed in one forward pass of ``</s> prompt = answer`` per batch: greedy decoding
    reproduces the answer exactly when, at every answer position, the right token is the
    most probable one given the right tokens before it (up to its first error greedy
    decoding has fed exactly those tokens), so the answer is right when every answer
    token is the argmax of its teacher-forced prediction.  A batch holds at most
    ``batch_size`` examples, fewer for long ones (``SCORE_BUDGET``)."""
    dataset = SyntheticDataset(task.examples(split), task.dictionary, shuffle=False)
    model.eval()
    device = next(model.parameters(), torch.empty(0)).device
    by_shape = {}
    for prompt, answer in dataset.examples:  # one prompt and answer length a batch: no padding
        by_shape.setdefault((len(prompt), len(answer)), []).append((prompt, answer))
    correct = 0
    for (prompt_length, answer_length), group in by_shape.items():
        length = prompt_length + answer_length + 2
        rows = max(1, min(batch_size, SCORE_BUDGET // (length * length * 4)))
        for start in range(0, len(group), rows):
            part = group[start:start + rows]
            tokens = torch.stack([dataset.encode(p, a)[:-1] for p, a in part]).to(device)
            logits = model(tokens)[0]
            predicted = logits[:, prompt_length + 1:prompt_length + 1 + answer_length].argmax(-1)
            correct += int((predicted == tokens[:, prompt_length + 2:]).all(1).sum())
    return 100.0 * correct / len(dataset)
