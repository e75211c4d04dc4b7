"""``sentence_vae``: sentence VAEs on plain text (Prokhorov, Li, Shareghi & Collier 2021).

DATA_DIR holds ``train.txt``, ``valid.txt`` and ``test.txt``: one tokenised sentence
per line, optionally led by an integer class label (as in
``../shared/data/text/yelp5``); a file is labelled when every line's first token
is an integer.  The vocabulary is the ``--vocab-size`` most frequent words of
train (ties broken alphabetically, so it is the same every run); other words
become <unk>.  A line longer than ``--max-sentence-tokens`` or an empty line is
an error naming the file and line, never silently cut.
"""

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset, data_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task

logger = logging.getLogger(__name__)
SPLITS = ("train", "valid", "test")


@dataclass
class SentenceVAEConfig(FairseqDataclass):
    data: str = field(default="", metadata={"help": "directory of train.txt, valid.txt, test.txt"})
    vocab_size: int = field(default=20000, metadata={"help": "words kept, the most frequent in train"})
    max_sentence_tokens: int = field(default=200, metadata={"help": "longest sentence accepted (longer: an error)"})


def read_corpus(path, max_tokens):
    """(sentences as lists of words, labels or None) of one file, checked line by line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sentence_vae: {path} is missing (DATA_DIR needs train.txt, valid.txt, test.txt)")
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    words = [line.split() for line in lines]
    for number, tokens in enumerate(words, 1):
        if not tokens:
            raise ValueError(f"{path}:{number}: empty line")
    labelled = bool(words) and all(t[0].isdigit() for t in words)
    if labelled:
        labels = [int(t[0]) for t in words]
        words = [t[1:] for t in words]
        for number, tokens in enumerate(words, 1):
            if not tokens:
                raise ValueError(f"{path}:{number}: a label and no sentence")
    for number, tokens in enumerate(words, 1):
        if len(tokens) > max_tokens:
            raise ValueError(f"{path}:{number}: {len(tokens)} tokens, more than --max-sentence-tokens {max_tokens}")
    return words, (labels if labelled else None)


def build_vocabulary(sentences, size):
    counts = Counter(word for sentence in sentences for word in sentence)
    dictionary = Dictionary()
    for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]:
        dictionary.add_symbol(word, n=count)
    return dictionary


class SentenceDataset(FairseqDataset):
    """Sentences as word ids + </s>, with their class labels (-1 when unlabelled)."""

    def __init__(self, sentences, labels, dictionary, shuffle):
        self.dictionary, self.shuffle = dictionary, shuffle
        self.items = [torch.tensor([dictionary.index(w) for w in s] + [dictionary.eos()]) for s in sentences]
        self.labels = torch.tensor(labels if labels is not None else [-1] * len(sentences))
        self.sizes = np.array([len(t) for t in self.items], dtype=np.int64)

    def __getitem__(self, index):
        return {"id": index, "tokens": self.items[index], "label": self.labels[index]}

    def __len__(self):
        return len(self.items)

    def collater(self, samples):
        if not samples:
            return {}
        pad, eos = self.dictionary.pad(), self.dictionary.eos()
        tokens = [s["tokens"] for s in samples]
        target = data_utils.collate_tokens(tokens, pad)
        # Teacher forcing: the decoder reads <s> w_1 ... w_n and predicts w_1 ... w_n </s>.
        previous = data_utils.collate_tokens(tokens, pad, eos_idx=eos, move_eos_to_beginning=True)
        lengths = torch.tensor([len(t) for t in tokens])
        return {"id": torch.tensor([s["id"] for s in samples]), "nsentences": len(samples),
                "ntokens": int(lengths.sum()), "target": target, "labels": torch.stack([s["label"] for s in samples]),
                "net_input": {"src_tokens": target, "src_lengths": lengths, "prev_output_tokens": previous}}

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        order = np.random.permutation(len(self)) if self.shuffle else np.arange(len(self))
        return order[np.argsort(self.sizes[order], kind="mergesort")]


@register_task("sentence_vae", dataclass=SentenceVAEConfig)
class SentenceVAETask(FairseqTask):
    cfg: SentenceVAEConfig

    def __init__(self, cfg, dictionary, corpora):
        super().__init__(cfg)
        self.dictionary, self.corpora = dictionary, corpora

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        if not cfg.data:
            raise ValueError("sentence_vae: give DATA_DIR (train.txt, valid.txt, test.txt)")
        corpora = {split: read_corpus(Path(cfg.data) / f"{split}.txt", cfg.max_sentence_tokens) for split in SPLITS}
        dictionary = build_vocabulary(corpora["train"][0], cfg.vocab_size)
        labelled = corpora["train"][1] is not None
        logger.info(f"sentence_vae {cfg.data}: {', '.join(f'{len(corpora[s][0])} {s}' for s in SPLITS)} sentences"
                    f"{' with class labels' if labelled else ''}; vocabulary {len(dictionary)}")
        return cls(cfg, dictionary, corpora)

    @property
    def num_classes(self):
        labels = self.corpora["train"][1]
        return max(labels) + 1 if labels is not None else 0

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        if split not in self.corpora:
            raise KeyError(f"sentence_vae has splits {list(SPLITS)}, not {split!r}")
        sentences, labels = self.corpora[split]
        self.datasets[split] = SentenceDataset(sentences, labels, self.dictionary, shuffle=(split == "train"))

    def max_positions(self):
        return self.cfg.max_sentence_tokens + 1

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
