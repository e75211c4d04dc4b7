"""The sentence-VAE corpus: its text files (one sentence per line, optional labels), the
vocabulary built from train, BERT's WordPiece ids, and the binarized form
(``fairseq-sparse-sentence-vae-binarize``) that the ``sentence_vae`` task reads."""

import logging
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from fairseq.data import Dictionary, data_utils

from ..modules.bert import load_bert_tokenizer
from ..text import read_lines

logger = logging.getLogger(__name__)
SPLITS = ("train", "valid", "test")


UNLABELLED = "-1"  # in a labels file: this sentence has no class


def read_label_file(path, count, text_path):
    """Class ids, one per line (the HSVAE sets' ``{split}_labels.txt``), as many as sentences;
    -1 marks a sentence without a label."""
    labels = []
    for number, line in enumerate(read_lines(path), 1):
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
    words = [line.split() for line in read_lines(path)]
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


def load_binarized(data, split, dictionary, with_bert):
    """(word ids, labels, BERT ids or None) of one binarized split, checked for completeness."""
    items = data_utils.load_indexed_dataset(str(data / f"{split}.words"), dictionary, "mmap")
    labels_path = data / f"{split}.labels.npy"
    if items is None or not labels_path.is_file():
        raise FileNotFoundError(f"{data}: {split}.words.idx/.bin or {split}.labels.npy missing; rerun "
                                "fairseq-sparse-sentence-vae-binarize")
    labels = np.load(labels_path)
    if len(labels) != len(items):
        raise ValueError(f"{labels_path}: {len(labels)} labels for {len(items)} sentences; rerun the binarizer")
    bert_tokens = None
    if with_bert:
        bert_tokens = data_utils.load_indexed_dataset(str(data / f"{split}.bert"), None, "mmap")
        if bert_tokens is None or len(bert_tokens) != len(items):
            raise FileNotFoundError(f"{data}/{split}.bert.idx: missing or incomplete; binarize with "
                                    "fairseq-sparse-sentence-vae-binarize --bert-model to use --bert-model")
    return items, labels, bert_tokens


def check_binarized_tokenizer(data, tokenizer, name):
    stored = data / "bert_tokenizer"
    if not stored.is_dir():
        raise FileNotFoundError(f"{stored}: missing; {data} was binarized without --bert-model")
    if load_bert_tokenizer(stored).get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"--bert-model {name} has another vocabulary than the one {data} was binarized with "
                         f"({stored})")


def encode_sentences(sentences, dictionary):
    """Word ids + </s> of each sentence (unknown words: <unk>)."""
    return [torch.tensor([dictionary.index(w) for w in s] + [dictionary.eos()]) for s in sentences]


def is_binarized(data):
    return (Path(data) / "dict.txt").is_file() and (Path(data) / "train.words.idx").is_file()
