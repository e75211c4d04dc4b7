"""The APE triplet format: WMT APE data as ``{split}.src``, ``{split}.mt`` and ``{split}.pe``
(one sentence per line, line-aligned), and its encoding as the model reads it: the
two-segment BERT input ``[CLS] src [SEP] mt [SEP]`` and the target ``pe [SEP]``
(Correia & Martins, ACL 2019).  The one owner of that format: the task, the
binarizer, the models (which read the segments back off the source), the data
pipelines and the experiments all use it from here.
"""

from pathlib import Path

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, data_utils

from ..text import read_lines as read_text_lines
from .bert_dictionary import wordpiece_ids

FIELDS = ("src", "mt", "pe")


def read_lines(path, allow_empty=False):
    """The lines of one triplet file (:func:`fairseq_sparse.text.read_lines`), an empty
    line an error that says to remove it from the three files alike."""
    return read_text_lines(path, allow_empty, hint="every line of a triplet file holds a sentence: remove it "
                                                  "from the .src, .mt and .pe files alike")


def read_triplets(directory, split):
    """The raw (src, mt, pe) lines of a split, checked to be non-empty and line-aligned."""
    texts = {}
    for name in FIELDS:
        path = Path(directory) / f"{split}.{name}"
        try:
            lines = list(read_lines(path))
        except FileNotFoundError:
            if name == "pe" and all((Path(directory) / f"{split}.{n}").is_file() for n in ("src", "mt")):
                raise FileNotFoundError(
                    f"{path}: missing: fairseq-generate scores post-edits against {split}.pe; to post-edit a "
                    f"split without references, run fairseq-sparse-postedit --path CKPT --src "
                    f"{Path(directory) / f'{split}.src'} --mt {Path(directory) / f'{split}.mt'} (or "
                    f"fairseq-interactive --task ape, one 'src<TAB>mt' pair per line)") from None
            raise FileNotFoundError(f"{path}: missing (the ape task reads {split}.src, {split}.mt, {split}.pe)") from None
        except OSError as e:
            raise ValueError(f"{path}: cannot be read ({e})") from None
        texts[name] = lines
    counts = {name: len(lines) for name, lines in texts.items()}
    if len(set(counts.values())) != 1:
        detail = ", ".join(f"{Path(directory) / f'{split}.{n}'} has {c}" for n, c in counts.items())
        raise ValueError(f"triplet files are not line-aligned: {detail} lines")
    return texts


def read_corpus(prefix, hint=""):
    """The {field: lines} of the triplet ``PREFIX.{src,mt,pe}``, checked as the ape task
    checks its splits (missing, empty, non-UTF-8 or misaligned files are named); `hint`
    follows the name of a missing file."""
    prefix = Path(prefix)
    for field in FIELDS:
        path = prefix.parent / f"{prefix.name}.{field}"
        if not path.is_file():
            raise SystemExit(f"{path}: missing{hint}")
    try:
        return read_triplets(prefix.parent, prefix.name)
    except (OSError, ValueError) as e:
        raise SystemExit(str(e)) from None


def find_corpus(directory, role):
    """The prefix P of the one triplet ``P.{src,mt,pe}`` in `directory` whose name ends in
    `role` (``train`` finds ``train.src`` and WMT17's ``de-en.train.src``), or None."""
    found = sorted(p.with_suffix("") for p in Path(directory).glob(f"*{role}.src")
                   if p.name == f"{role}.src" or p.name.endswith(f".{role}.src"))
    if len(found) > 1:
        raise SystemExit(f"{directory}: more than one {role} corpus ({', '.join(f'{p.name}.*' for p in found)})")
    return found[0] if found else None


def held_out(texts, size, option):
    """(all but the last `size` triplets, the last `size`) of {field: lines}; `option` names
    the setting in the error when the corpus is not longer than that."""
    total = len(next(iter(texts.values())))
    if not 1 <= size < total:
        raise SystemExit(f"{option} {size}: must be at least 1 and below the corpus's {total} triplets")
    return ({f: lines[:-size] for f, lines in texts.items()}, {f: lines[-size:] for f, lines in texts.items()})


def write_triplets(directory, split, texts):
    """Write {field: lines} as directory/split.{src,mt,pe}, the files read_triplets reads."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, lines in texts.items():
        (directory / f"{split}.{name}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def encode_segments(tokenizer, lines, max_tokens):
    """WordPiece ids of each line, cut to max_tokens; also how many lines were cut."""
    if max_tokens < 1:  # a negative cut would silently drop the end of every line instead
        raise ValueError(f"--max-segment-tokens {max_tokens}: must be at least 1")
    ids = wordpiece_ids(tokenizer, lines)
    cut = sum(len(x) > max_tokens for x in ids)
    return [x[:max_tokens] for x in ids], cut


def mt_segment(src_tokens, sep_index, pad_index):
    """1 where a token of ``[CLS] src [SEP] mt [SEP]`` belongs to the mt segment
    (everything after the first ``[SEP]``), else 0 (also for padding, on either side)."""
    sep = src_tokens.eq(sep_index).long()
    return ((torch.cumsum(sep, 1) - sep) > 0).long() * src_tokens.ne(pad_index).long()


def build_source(cls, sep, src_ids, mt_ids):
    return [cls] + src_ids + [sep] + mt_ids + [sep]


def encode_triplets(tokenizer, texts, max_tokens):
    """(sources, targets, {field: lines cut}) as lists of id lists."""
    cut, encoded = {}, {}
    for name in FIELDS:
        encoded[name], cut[name] = encode_segments(tokenizer, texts[name], max_tokens)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    sources = [build_source(cls, sep, s, m) for s, m in zip(encoded["src"], encoded["mt"])]
    targets = [p + [sep] for p in encoded["pe"]]
    return sources, targets, cut


class MaskedMTDataset(BaseWrapperDataset):
    """Training examples whose mt segment has each WordPiece replaced by ``[MASK]`` with
    probability ``prob``, drawn afresh for every epoch from (seed, epoch, example index),
    so that an interrupted run resumes with the same masks.

    Why: the MT is most of the post-edit, so a decoder that copies it already reaches a low
    loss and can learn to ignore its source (scripts/ape_source_ablation.py measures how
    much it reads it).  A masked MT word can only be recovered from the source and the
    context, so the src segment has to be read.  ``[CLS]``, the src segment, both ``[SEP]``
    and the target are never touched.  The task's default is off: docs/notes/ape-runs.md
    (masking the MT) has what masking cost."""

    def __init__(self, dataset, mask_index, sep_index, prob, seed):
        super().__init__(dataset)
        self.mask_index, self.sep_index, self.prob, self.seed = mask_index, sep_index, prob, seed
        self.epoch = 1

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.epoch = epoch

    @property
    def tgt(self):
        return self.dataset.tgt

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return True  # the batches do not change with the epoch, only the masks drawn in __getitem__

    def __getitem__(self, index):
        item = dict(self.dataset[index])
        source = item["source"]
        # The mt segment's WordPieces: mt_segment's positions less the closing [SEP].
        mt = mt_segment(source[None], self.sep_index, self.dataset.src_dict.pad())[0].nonzero().squeeze(1)[:-1]
        with data_utils.numpy_seed(self.seed, self.epoch, index):
            masked = mt[torch.from_numpy(np.random.random(len(mt)) < self.prob)]
        if len(masked):
            source = source.clone()
            source[masked] = self.mask_index
            item["source"] = source
        return item
