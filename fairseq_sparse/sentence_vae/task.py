"""``sentence_vae``: sentence VAEs on plain text (Prokhorov, Li, Shareghi & Collier 2021).

DATA_DIR holds ``train.txt``, ``valid.txt`` and ``test.txt``: one tokenised sentence
per line, optionally led by an integer class label (as in
``../shared/data/text/yelp5``); a file is labelled when every line's first token
is an integer.  Labels may instead lie beside the text in ``{split}_labels.txt``, one
class id per line (the HSVAE sets' format), where -1 marks a sentence without a
label: the VAE trains on every sentence, the analysis's classifiers on the labelled
ones.  The vocabulary is the ``--vocab-size`` most frequent words of
train (ties broken alphabetically, so it is the same every run); other words
become <unk>.  A line longer than ``--max-sentence-tokens`` or an empty line is
an error naming the file and line, never silently cut.

With ``--bert-model`` (for ``--arch bert_sentence_vae``, the paper's B-VAE and
B-HSVAE) each sentence also goes to the encoder as that BERT's WordPiece ids,
``[CLS] sentence [SEP]`` (``net_input["bert_tokens"]``); the decoder still writes
the task's words.

The files are read by ``vae/corpus.py``.  DATA_DIR may instead hold the output of
``fairseq-sparse-sentence-vae-binarize``
(``dict.txt``, ``{split}.words.{bin,idx}``, ``{split}.labels.npy`` and, when
binarized with ``--bert-model``, ``{split}.bert.{bin,idx}``): fairseq's
memory-mapped datasets, read without tokenising or counting words again.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset, data_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task

from ..modules.bert import VocabularyCheck, load_bert_tokenizer
from .corpus import (SPLITS, bert_token_ids, build_vocabulary, check_binarized_tokenizer, encode_sentences,
                     is_binarized, load_binarized, read_corpus)

logger = logging.getLogger(__name__)


@dataclass
class SentenceVAEConfig(FairseqDataclass):
    data: str = field(default="", metadata={
        "help": "directory of train.txt, valid.txt, test.txt, or of their binarized form"})
    vocab_size: int = field(default=20000, metadata={
        "help": "words kept, the most frequent in train (binarized data keeps the vocabulary it was binarized with)"})
    max_sentence_tokens: int = field(default=200, metadata={"help": "longest sentence accepted (longer: an error)"})
    bert_model: Optional[str] = field(default=None, metadata={
        "help": "BERT checkpoint (directory or cached name) whose WordPiece ids are also given to the encoder; "
                "needed by --arch bert_sentence_vae"})


class SentenceDataset(FairseqDataset):
    """Sentences as word ids + </s> (a list of tensors or a memory-mapped dataset), their
    class labels (-1 when unlabelled) and, when given, their BERT WordPiece ids."""

    def __init__(self, items, labels, dictionary, shuffle, bert_tokens=None, bert_pad=0):
        self.dictionary, self.shuffle = dictionary, shuffle
        self.items = items
        self.labels = torch.as_tensor(labels, dtype=torch.long)
        self.sizes = (np.asarray(items.sizes, dtype=np.int64) if hasattr(items, "sizes")
                      else np.array([len(t) for t in items], dtype=np.int64))
        self.bert_tokens, self.bert_pad = bert_tokens, bert_pad

    def __getitem__(self, index):
        item = {"id": index, "tokens": self.items[index].long(), "label": self.labels[index]}
        if self.bert_tokens is not None:
            item["bert_tokens"] = self.bert_tokens[index].long()
        return item

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
        net_input = {"src_tokens": target, "src_lengths": lengths, "prev_output_tokens": previous}
        if self.bert_tokens is not None:
            net_input["bert_tokens"] = data_utils.collate_tokens([s["bert_tokens"] for s in samples], self.bert_pad)
        return {"id": torch.tensor([s["id"] for s in samples]), "nsentences": len(samples),
                "ntokens": int(lengths.sum()), "target": target, "labels": torch.stack([s["label"] for s in samples]),
                "net_input": net_input}

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        order = np.random.permutation(len(self)) if self.shuffle else np.arange(len(self))
        return order[np.argsort(self.sizes[order], kind="mergesort")]


@register_task("sentence_vae", dataclass=SentenceVAEConfig)
class SentenceVAETask(FairseqTask):
    """``corpora`` holds each split's (sentences, labels) for text data, None for binarized data."""

    cfg: SentenceVAEConfig

    def __init__(self, cfg, dictionary, corpora):
        super().__init__(cfg)
        self.dictionary, self.corpora = dictionary, corpora
        self.bert_tokenizer = load_bert_tokenizer(cfg.bert_model) if cfg.bert_model else None
        if self.bert_tokenizer is not None and corpora is None:
            check_binarized_tokenizer(Path(cfg.data), self.bert_tokenizer, cfg.bert_model)

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        if not cfg.data:
            raise ValueError("sentence_vae: give DATA_DIR (train.txt, valid.txt, test.txt)")
        if is_binarized(cfg.data):
            dictionary = Dictionary.load(str(Path(cfg.data) / "dict.txt"))
            logger.info(f"sentence_vae {cfg.data}: binarized; vocabulary {len(dictionary)}")
            return cls(cfg, dictionary, None)
        corpora = {split: read_corpus(Path(cfg.data) / f"{split}.txt", cfg.max_sentence_tokens) for split in SPLITS}
        dictionary = build_vocabulary(corpora["train"][0], cfg.vocab_size)
        labelled = corpora["train"][1] is not None
        logger.info(f"sentence_vae {cfg.data}: {', '.join(f'{len(corpora[s][0])} {s}' for s in SPLITS)} sentences"
                    f"{' with class labels' if labelled else ''}; vocabulary {len(dictionary)}")
        return cls(cfg, dictionary, corpora)

    def build_model(self, cfg, from_checkpoint=False):
        """With a BERT encoder, the model also records the BERT vocabulary: loading weights
        of another vocabulary is an error naming both (``modules.bert.VocabularyCheck``)."""
        model = super().build_model(cfg, from_checkpoint)
        if self.bert_tokenizer is not None:
            model.bert_vocabulary = VocabularyCheck(self.bert_tokenizer, f"--bert-model {self.cfg.bert_model}")
        return model

    @property
    def num_classes(self):
        if self.corpora is None:
            labels = np.load(Path(self.cfg.data) / "train.labels.npy")
        else:
            labels = self.corpora["train"][1]
        # Classes are those of the labelled sentences; -1 (no label) is none of them.
        return int(np.max(labels)) + 1 if labels is not None and len(labels) and np.max(labels) >= 0 else 0

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        if split not in SPLITS:
            raise KeyError(f"sentence_vae has splits {list(SPLITS)}, not {split!r}")
        if self.corpora is None:
            items, labels, bert_tokens = load_binarized(Path(self.cfg.data), split, self.dictionary,
                                                        self.bert_tokenizer is not None)
        else:
            sentences, labels = self.corpora[split]
            items, labels = encode_sentences(sentences, self.dictionary), (labels or [-1] * len(sentences))
            bert_tokens = None
            if self.bert_tokenizer is not None:
                bert_tokens = bert_token_ids(sentences, self.bert_tokenizer, Path(self.cfg.data) / f"{split}.txt")
        bert_pad = self.bert_tokenizer.pad_token_id if self.bert_tokenizer is not None else 0
        self.datasets[split] = SentenceDataset(items, labels, self.dictionary, shuffle=(split == "train"),
                                               bert_tokens=bert_tokens, bert_pad=bert_pad)

    def max_positions(self):
        return self.cfg.max_sentence_tokens + 1

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
