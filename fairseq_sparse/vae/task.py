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

DATA_DIR may instead hold the output of ``fairseq-sparse-sentence-vae-binarize``
(``dict.txt``, ``{split}.words.{bin,idx}``, ``{split}.labels.npy`` and, when
binarised with ``--bert-model``, ``{split}.bert.{bin,idx}``): fairseq's
memory-mapped datasets, read without tokenising or counting words again.
"""

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset, data_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task

from ..modules.bert import VocabularyCheck, load_bert_tokenizer

logger = logging.getLogger(__name__)
SPLITS = ("train", "valid", "test")


@dataclass
class SentenceVAEConfig(FairseqDataclass):
    data: str = field(default="", metadata={
        "help": "directory of train.txt, valid.txt, test.txt, or of their binarised form"})
    vocab_size: int = field(default=20000, metadata={
        "help": "words kept, the most frequent in train (binarised data keeps the vocabulary it was binarised with)"})
    max_sentence_tokens: int = field(default=200, metadata={"help": "longest sentence accepted (longer: an error)"})
    bert_model: Optional[str] = field(default=None, metadata={
        "help": "BERT checkpoint (directory or cached name) whose WordPiece ids are also given to the encoder; "
                "needed by --arch bert_sentence_vae"})


def _read_text(path):
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        newline = b"\n"
        line, column = raw[:e.start].count(newline) + 1, e.start - (raw.rfind(newline, 0, e.start) + 1)
        raise ValueError(f"{path}:{line}: not UTF-8 ({e.reason} at byte {column} of the line)") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


UNLABELLED = "-1"  # in a labels file: this sentence has no class


def read_label_file(path, count, text_path):
    """Class ids, one per line (the HSVAE sets' ``{split}_labels.txt``), as many as sentences;
    -1 marks a sentence without a label."""
    labels = []
    for number, line in enumerate(_read_text(path), 1):
        if not (line.strip().isdigit() or line.strip() == UNLABELLED):
            raise ValueError(f"{path}:{number}: {line.strip()!r} is not a class id (a non-negative integer, "
                             f"or {UNLABELLED} for no label)")
        labels.append(int(line))
    if len(labels) != count:
        raise ValueError(f"{path} has {len(labels)} labels but {text_path} has {count} sentences")
    return labels


def read_corpus(path, max_tokens):
    """(sentences as lists of words, labels or None) of one file, checked line by line.

    Labels lead each line (``LABEL sentence``) or, when ``{split}_labels.txt`` lies beside
    ``{split}.txt`` (the HSVAE sets' format), come from that file, one per line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sentence_vae: {path} is missing (DATA_DIR needs train.txt, valid.txt, test.txt)")
    words = [line.split() for line in _read_text(path)]
    for number, tokens in enumerate(words, 1):
        if not tokens:
            raise ValueError(f"{path}:{number}: empty line")
    label_file = path.with_name(f"{path.stem}_labels.txt")
    if label_file.is_file():
        labels = read_label_file(label_file, len(words), path)
    else:
        words, labels = _leading_labels(words, path)
    for number, tokens in enumerate(words, 1):
        if len(tokens) > max_tokens:
            raise ValueError(f"{path}:{number}: {len(tokens)} tokens, more than --max-sentence-tokens {max_tokens}")
    return words, labels


def _leading_labels(words, path):
    """(sentences, labels or None) of lines that may each be led by a class id."""
    # A split is labelled or not as a whole: every line led by a class id, or (numbers are
    # words too) a text where few lines start with one.  Mostly labelled is a broken line.
    led = [t[0].isdigit() for t in words]
    labelled = bool(words) and all(led)
    if not labelled and sum(led) > len(led) / 2:
        number = led.index(False) + 1
        raise ValueError(f"{path}:{number}: no class label, while {sum(led)} of the {len(led)} lines start with one "
                         "(a labelled split has an integer label leading every line)")
    if not labelled:
        return words, None
    labels = [int(t[0]) for t in words]
    words = [t[1:] for t in words]
    for number, tokens in enumerate(words, 1):
        if not tokens:
            raise ValueError(f"{path}:{number}: a label and no sentence")
    return words, labels


def build_vocabulary(sentences, size):
    counts = Counter(word for sentence in sentences for word in sentence)
    dictionary = Dictionary()
    for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]:
        dictionary.add_symbol(word, n=count)
    return dictionary


def bert_token_ids(sentences, tokenizer, path):
    """``[CLS] sentence [SEP]`` WordPiece ids of each sentence; one longer than the BERT's
    positions is an error naming the file and line (cutting it would hide words from the encoder)."""
    limit = tokenizer.model_max_length if tokenizer.model_max_length < 10**6 else 512
    ids = tokenizer([" ".join(words) for words in sentences], add_special_tokens=True)["input_ids"]
    for number, pieces in enumerate(ids, 1):
        if len(pieces) > limit:
            raise ValueError(f"{path}:{number}: {len(pieces)} WordPieces, more than the BERT's {limit} positions")
    return [torch.tensor(pieces) for pieces in ids]


def load_binarised(data, split, dictionary, with_bert):
    """(word ids, labels, BERT ids or None) of one binarised split, checked for completeness."""
    items = data_utils.load_indexed_dataset(str(data / f"{split}.words"), dictionary, "mmap")
    labels_path = data / f"{split}.labels.npy"
    if items is None or not labels_path.is_file():
        raise FileNotFoundError(f"{data}: {split}.words.idx/.bin or {split}.labels.npy missing; rerun "
                                "fairseq-sparse-sentence-vae-binarize")
    labels = np.load(labels_path)
    if len(labels) != len(items):
        raise ValueError(f"{labels_path}: {len(labels)} labels for {len(items)} sentences; rerun the binariser")
    bert_tokens = None
    if with_bert:
        bert_tokens = data_utils.load_indexed_dataset(str(data / f"{split}.bert"), None, "mmap")
        if bert_tokens is None or len(bert_tokens) != len(items):
            raise FileNotFoundError(f"{data}/{split}.bert.idx: missing or incomplete; binarise with "
                                    "fairseq-sparse-sentence-vae-binarize --bert-model to use --bert-model")
    return items, labels, bert_tokens


def check_binarised_tokenizer(data, tokenizer, name):
    stored = data / "bert_tokenizer"
    if not stored.is_dir():
        raise FileNotFoundError(f"{stored}: missing; {data} was binarised without --bert-model")
    if load_bert_tokenizer(stored).get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"--bert-model {name} has another vocabulary than the one {data} was binarised with "
                         f"({stored})")


def encode_sentences(sentences, dictionary):
    """Word ids + </s> of each sentence (unknown words: <unk>)."""
    return [torch.tensor([dictionary.index(w) for w in s] + [dictionary.eos()]) for s in sentences]


def is_binarised(data):
    return (Path(data) / "dict.txt").is_file() and (Path(data) / "train.words.idx").is_file()


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
    """``corpora`` holds each split's (sentences, labels) for text data, None for binarised data."""

    cfg: SentenceVAEConfig

    def __init__(self, cfg, dictionary, corpora):
        super().__init__(cfg)
        self.dictionary, self.corpora = dictionary, corpora
        self.bert_tokenizer = load_bert_tokenizer(cfg.bert_model) if cfg.bert_model else None
        if self.bert_tokenizer is not None and corpora is None:
            check_binarised_tokenizer(Path(cfg.data), self.bert_tokenizer, cfg.bert_model)

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        if not cfg.data:
            raise ValueError("sentence_vae: give DATA_DIR (train.txt, valid.txt, test.txt)")
        if is_binarised(cfg.data):
            dictionary = Dictionary.load(str(Path(cfg.data) / "dict.txt"))
            logger.info(f"sentence_vae {cfg.data}: binarised; vocabulary {len(dictionary)}")
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
            items, labels, bert_tokens = load_binarised(Path(self.cfg.data), split, self.dictionary,
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
