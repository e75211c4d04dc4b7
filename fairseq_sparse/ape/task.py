"""``ape``: automatic post-editing as a fairseq task.

Reads WMT APE triplets ``{split}.src``, ``{split}.mt``, ``{split}.pe`` (one sentence
per line, line-aligned) and presents each as a translation example whose source is
the two-segment BERT input ``[CLS] src [SEP] mt [SEP]`` and whose target is the
post-edit ``pe [SEP]`` (Correia & Martins, ACL 2019).  Segment ids (0 for src,
1 for mt) are not stored: models read them off the source, where everything after
the first ``[SEP]`` is segment 1.

Text is tokenised by the BERT checkpoint's own WordPiece tokenizer, one vocabulary
for source and target, with punctuation inside a data token kept as ``##`` pieces
(:func:`~fairseq_sparse.ape.bert_dictionary.wordpiece_ids`), so that post-edits
come back in the data's own tokenisation, scorable against ``.pe``.  DATA_DIR may
hold the raw triplets (tokenised when loaded: fine for small data) or the output of
``fairseq-sparse-ape-binarize`` (fairseq's memory-mapped datasets, for millions of
triplets).  The tokenizer's files are kept with the data in ``DATA_DIR/tokenizer``,
as fairseq keeps ``dict.txt`` there, so that ``fairseq-generate DATA_DIR --task ape``
needs no ``--bert-model``.  ``fairseq-interactive`` reads one ``src<TAB>mt`` pair per line.
"""

import logging
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from fairseq.data import LanguagePairDataset, data_utils
from fairseq.data.list_dataset import ListDataset
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError

from ..modules.bert import load_bert_tokenizer, tokenizer_files_exist, VocabularyCheck
from .bert_dictionary import BertDictionary, WordPieceDetokenizer
from .decoding import build_ape_generator, check_decoding_options
from .triplets import MaskedMTDataset, build_source, encode_segments, encode_triplets, read_triplets

logger = logging.getLogger(__name__)


def check_ape_checkpoint(model_cfg):
    """Refuse a checkpoint's model config that is not an APE model, naming the task it was
    trained with where the config says it."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from .bert_ape import BertAPEModel
    from .dual_source_transformer import DualSourceTransformerModel

    name = getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", None)
    if issubclass(ARCH_MODEL_REGISTRY.get(name, object), (BertAPEModel, DualSourceTransformerModel)):
        return
    task = getattr(model_cfg, "task", None)  # a Namespace of the run's options (legacy and --user-dir models)
    if isinstance(model_cfg, DictConfig):  # part of a checkpoint's config: its task beside it
        try:
            task = OmegaConf.select(model_cfg, "..task._name", default=task)
        except ConfigKeyError:  # a model config on its own
            pass
    trained = f"trained with --task {task}" if isinstance(task, str) else "trained for another task"
    raise ValueError(f"--task ape: the checkpoint holds a {name!r} model, {trained}, not an APE model (bert_ape, "
                     "dual_source_transformer); give --task that checkpoint's task, or an APE checkpoint")


@dataclass
class APEConfig(FairseqDataclass):
    data: str = field(default="", metadata={"help": "directory with raw {split}.{src,mt,pe} triplets, or the "
                                                    "output of fairseq-sparse-ape-binarize"})
    bert_model: Optional[str] = field(
        default=None,
        metadata={"help": "BERT checkpoint (local directory, or a model name already in the Hugging Face cache) "
                          "whose WordPiece tokenizer encodes src, mt and pe and which bert_ape is initialised from; "
                          "optional once DATA_DIR/tokenizer exists"})
    max_segment_tokens: int = field(
        default=200,
        metadata={"help": "src, mt and pe are each cut to at most this many WordPieces (BERT has 512 positions "
                          "for [CLS] src [SEP] mt [SEP]); how many were cut is logged per split"})
    max_source_positions: int = field(default=512, metadata={"help": "max tokens of [CLS] src [SEP] mt [SEP]"})
    max_target_positions: int = field(default=512, metadata={"help": "max tokens of a post-edit"})
    mt_mask_prob: float = field(
        default=0.0,
        metadata={"help": "training: replace each WordPiece of the mt segment of a training input by [MASK] with "
                          "this probability, drawn afresh each epoch (seeded by --seed), so that the model must read "
                          "the src to recover the masked words rather than copy the MT; valid and test inputs are "
                          "never masked; 0: off"})
    seed: int = II("common.seed")
    conservativeness: float = field(
        default=0.0,
        metadata={"help": "generation: subtract this from the log-probability of every candidate token that "
                          "occurs in neither the sentence's src nor its mt (WordPieces of their words; [SEP] "
                          "always counts as present); 0: plain beam search"})
    keep_mt_margin: Optional[float] = field(
        default=None,
        metadata={"help": "generation: score the MT itself by forced decoding and keep it unless the best "
                          "post-edit beats it by more than this many nats per token (same length normalisation "
                          "as the beam); inf keeps every MT; default: off"})
    keep_mt_max_edits: Optional[int] = field(
        default=None,
        metadata={"help": "generation, with --keep-mt-margin: a post-edit replaces the MT only if it also lies "
                          "within this many word edits of it (TER's insertions, deletions, substitutions and "
                          "shifts); the best hypothesis of the beam that passes both tests is returned; 0 keeps "
                          "every MT; default: no limit"})


def keep_tokenizer(tokenizer, stored):
    """Save the tokenizer as ``stored`` in one step: written beside it, then renamed, so that
    distributed ranks starting together on new data never read a half-written one."""
    staging = stored.parent / f".tokenizer-{uuid.uuid4().hex}"  # mkdir, unlike mkdtemp, honours the umask
    try:
        staging.mkdir()
        tokenizer.save_pretrained(str(staging))
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise OSError(f"cannot keep the tokenizer with the data in {stored} ({e}); make DATA_DIR writable "
                      "or binarize it elsewhere with fairseq-sparse-ape-binarize") from None
    try:
        staging.rename(stored)
    except OSError:  # another rank kept its copy first
        shutil.rmtree(staging)
        if not tokenizer_files_exist(stored):
            raise FileExistsError(f"{stored} exists but holds no tokenizer; remove it") from None


@register_task("ape", dataclass=APEConfig)
class APETask(FairseqTask):
    """Automatic post-editing: (src, mt) -> pe with a BERT WordPiece vocabulary."""

    cfg: APEConfig

    def __init__(self, cfg, tokenizer):
        super().__init__(cfg)
        # A checkpoint saved before the edit limit lacks that option (off).
        check_decoding_options(cfg.conservativeness, cfg.keep_mt_margin, getattr(cfg, "keep_mt_max_edits", None))
        # Checkpoints from before MT masking have no such option (off).
        self.mt_mask_prob = getattr(cfg, "mt_mask_prob", 0.0)
        if not 0.0 <= self.mt_mask_prob < 1.0:  # NaN fails this too
            raise ValueError(f"--mt-mask-prob {self.mt_mask_prob}: must be in [0, 1) (1 would mask every MT word)")
        if self.mt_mask_prob > 0 and tokenizer.mask_token_id is None:
            raise ValueError(f"--mt-mask-prob {self.mt_mask_prob}: the tokenizer has no [MASK] token")
        self.tokenizer = tokenizer
        self.dictionary = BertDictionary(tokenizer)

    @classmethod
    def setup_task(cls, cfg, from_checkpoint=False, **kwargs):
        return cls(cfg, cls.tokenizer_for(cfg, from_checkpoint))

    @staticmethod
    def tokenizer_for(cfg, from_checkpoint=False):
        data = Path(cfg.data)
        if not data.is_dir():
            raise FileNotFoundError(f"DATA_DIR {data}: not a directory")
        stored = data / "tokenizer"
        if tokenizer_files_exist(stored):
            tokenizer = load_bert_tokenizer(stored, option=f"tokenizer kept with the data, {stored}")
            if cfg.bert_model and Path(cfg.bert_model).exists():
                given = load_bert_tokenizer(cfg.bert_model)
                if given.get_vocab() != tokenizer.get_vocab() and from_checkpoint:  # bert_model: the training run's
                    raise ValueError(f"the checkpoint's model was trained from {cfg.bert_model}, whose vocabulary "
                                     f"is not that of the tokenizer kept with the data in {stored}: {data} was "
                                     "encoded for another model; give the data directory it was trained on")
                if given.get_vocab() != tokenizer.get_vocab():
                    raise ValueError(f"--bert-model {cfg.bert_model} has another vocabulary than the tokenizer kept "
                                     f"with the data in {stored}; remove {stored} to re-encode with the new one")
            return tokenizer
        if not cfg.bert_model:
            raise ValueError(f"--bert-model is required: {stored} does not exist yet (it is written the first "
                             "time the task runs with --bert-model)")
        tokenizer = load_bert_tokenizer(cfg.bert_model)
        if not from_checkpoint:  # training keeps it with its data; loading a model writes nothing there
            keep_tokenizer(tokenizer, stored)
        return tokenizer

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary

    def max_positions(self):
        return (self.cfg.max_source_positions, self.cfg.max_target_positions)

    def build_model(self, cfg, from_checkpoint=False):
        """The architecture's model, which also records the vocabulary it was built on:
        loading weights of another vocabulary is an error naming both.  A checkpoint of
        another task's model (``fairseq-generate --task ape --path`` of an ``ssvae``) is an
        error naming that task and model."""
        if from_checkpoint:
            check_ape_checkpoint(cfg)
        model = super().build_model(cfg, from_checkpoint)
        model.bert_vocabulary = VocabularyCheck(
            self.tokenizer, f"the tokenizer kept with the data in {Path(self.cfg.data) / 'tokenizer'}")
        return model

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        """fairseq's generator with --conservativeness and --keep-mt-margin (with --keep-mt-max-edits;
        see .decoding)."""
        generator = super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, **kwargs)
        return build_ape_generator(generator, models, self.dictionary, self.cfg.conservativeness,
                                   self.cfg.keep_mt_margin,
                                   keep_mt_max_edits=getattr(self.cfg, "keep_mt_max_edits", None))

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's, with a warning for every batch whose best post-edits include empty ones
        (the model ended them at once): they print as empty lines and score as such, which a
        user must not have to discover from a TER of 100."""
        hypos = super().inference_step(generator, models, sample, prefix_tokens, constraints)
        eos = self.dictionary.eos()
        ids = sample["id"].tolist() if "id" in sample else range(len(hypos))  # fairseq-interactive has none
        empty = [i for i, nbest in zip(ids, hypos) if nbest and not (nbest[0]["tokens"] != eos).any()]
        if empty:
            logger.warning(f"{len(empty)} of {len(hypos)} post-edits of this batch are empty: the model ended them "
                           f"at once (sentence ids {empty[:10]}{', ...' if len(empty) > 10 else ''}); a model "
                           "trained too briefly does this")
        return hypos

    def build_bpe(self, args):
        """fairseq-generate's detokeniser: WordPieces merged back into words."""
        return WordPieceDetokenizer()

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        data = Path(self.cfg.data)
        prefix = data / split
        if Path(f"{prefix}.input.idx").exists():
            source = data_utils.load_indexed_dataset(f"{prefix}.input", self.dictionary, "mmap")
            target = data_utils.load_indexed_dataset(f"{prefix}.pe", self.dictionary, "mmap")
            if source is None or target is None or len(source) != len(target):
                raise ValueError(f"{prefix}.input / {prefix}.pe: incomplete binarized split; rerun "
                                 "fairseq-sparse-ape-binarize")
            logger.info(f"ape {split}: {len(source)} binarized triplets from {data}")
        else:
            texts = read_triplets(data, split)
            sources, targets, cut = encode_triplets(self.tokenizer, texts, self.cfg.max_segment_tokens)
            cuts = ", ".join(f"{n} {name}" for name, n in cut.items())
            logger.info(f"ape {split}: {len(sources)} triplets from {data}; cut to --max-segment-tokens "
                        f"{self.cfg.max_segment_tokens}: {cuts}")
            source = ListDataset([torch.tensor(s, dtype=torch.long) for s in sources],
                                 np.array([len(s) for s in sources]))
            target = ListDataset([torch.tensor(t, dtype=torch.long) for t in targets],
                                 np.array([len(t) for t in targets]))
        dataset = LanguagePairDataset(
            source, source.sizes, self.dictionary, target, target.sizes, self.dictionary,
            left_pad_source=False, left_pad_target=False, shuffle=(split == "train"),
        )
        if split == "train" and self.mt_mask_prob > 0:
            dataset = MaskedMTDataset(dataset, self.tokenizer.mask_token_id, self.dictionary.eos(), self.mt_mask_prob,
                                      self.cfg.seed)
        self.datasets[split] = dataset

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """Every triplet is kept or the run stops: fairseq skips training examples longer than
        the model's positions with only a warning (it always passes ignore_invalid_inputs for
        training), which here would silently train on part of the data.  The cut is explicit
        (--max-segment-tokens), so an example that does not fit names that option; so does an
        input pair to post-edit (fairseq-interactive, PostEditor) that does not fit."""
        kept, too_long = dataset.filter_indices_by_size(indices, max_positions)
        if len(too_long) == 0:
            return kept
        first = int(min(too_long))
        if dataset.tgt is None:  # inference: pairs from fairseq-interactive or PostEditor
            source_positions = max_positions[0] if isinstance(max_positions, tuple) else max_positions
            raise ValueError(
                f"ape input: {len(too_long)} (src, mt) pairs are longer than the model's {source_positions} source "
                f"positions, the first is pair {first + 1} ({int(dataset.size(first)[0])} tokens as "
                f"[CLS] src [SEP] mt [SEP]); lower --max-segment-tokens (src and mt are each cut to it; from Python, "
                f"PostEditor.from_checkpoint(..., max_segment_tokens=N))")
        split = next((name for name, d in self.datasets.items() if d is dataset), "input")
        source, target = (int(n) for n in dataset.size(first))
        raise ValueError(
            f"ape {split}: {len(too_long)} triplets are longer than the model's (source, target) positions "
            f"{max_positions}, the first on line {first + 1} of the {split} triplets ({source} source, "
            f"{target} target tokens); lower --max-segment-tokens (src and mt are each cut to it in "
            f"[CLS] src [SEP] mt [SEP]), for binarized data when running fairseq-sparse-ape-binarize")

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        return LanguagePairDataset(src_tokens, src_lengths, self.dictionary, left_pad_source=False,
                                   constraints=constraints)

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """fairseq-interactive: each input line is one ``src<TAB>mt`` pair, encoded as
        training encodes its triplets.  ``encode_fn`` (fairseq's --tokenizer/--bpe hook) is
        not applied: the input is tokenised like the ``.src``/``.mt`` files, and WordPiece
        is the task's own."""
        pairs = [line.split("\t") for line in lines]
        for line, pair in zip(lines, pairs):
            if len(pair) != 2 or not all(field.strip() for field in pair):
                # fairseq-interactive strips each line, so an empty first or last field loses its tab.
                raise ValueError(
                    f"fairseq-interactive --task ape reads one 'src<TAB>mt' pair per line, both non-empty; this "
                    f"line has {len(pair)} tab-separated field{'s' if len(pair) != 1 else ''}"
                    f"{' (one empty)' if len(pair) == 2 else ''}: {line[:100]!r} (an empty src or mt loses its "
                    "tab when fairseq-interactive strips the line; --constraints, which also splits lines on "
                    "tabs, cannot be used with --task ape)")
        sources = self.encode_inputs([src for src, _ in pairs], [mt for _, mt in pairs])
        return sources, [len(s) for s in sources]

    def encode_inputs(self, src_lines, mt_lines):
        """Source tensors for (src, mt) pairs, as training builds them."""
        for name, lines in (("src", src_lines), ("mt", mt_lines)):
            if isinstance(lines, (str, bytes)):  # its characters would become sentences
                raise TypeError(f"ape input: {name} must be a list of sentences, not one {type(lines).__name__} "
                                "(wrap a single sentence in a list)")
        src_lines, mt_lines = list(src_lines), list(mt_lines)
        if len(src_lines) != len(mt_lines):
            raise ValueError(f"{len(src_lines)} source sentences but {len(mt_lines)} MT outputs")
        for name, lines in (("src", src_lines), ("mt", mt_lines)):
            for i, line in enumerate(lines):
                if not isinstance(line, str):
                    raise TypeError(f"ape input pair {i + 1}: {name} is {type(line).__name__}, not a sentence (str)")
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError as e:  # undecodable input bytes kept as surrogates (stdin)
                    raise ValueError(f"ape input pair {i + 1}: {name} is not UTF-8 text ({e.reason} at "
                                     f"character {e.start}): {line[:60]!r}") from None
        src, src_cut = encode_segments(self.tokenizer, src_lines, self.cfg.max_segment_tokens)
        mt, mt_cut = encode_segments(self.tokenizer, mt_lines, self.cfg.max_segment_tokens)
        if src_cut or mt_cut:
            logger.warning(f"ape input: of {len(src)} (src, mt) pairs, {src_cut} src and {mt_cut} mt cut to "
                           f"--max-segment-tokens {self.cfg.max_segment_tokens}")
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        return [torch.tensor(build_source(cls, sep, s, m), dtype=torch.long) for s, m in zip(src, mt)]
