"""Binarize a ``sentence_vae`` corpus (fairseq's memory-mapped datasets).

    fairseq-sparse-sentence-vae-binarize --raw RAW_DIR --destdir DATA_DIR [--vocab-size 20000] [--bert-model PATH]

Reads RAW_DIR/{train,valid,test}.txt exactly as the task reads text (same checks,
errors naming file and line; same vocabulary: the ``--vocab-size`` most frequent
train words) and writes DATA_DIR/dict.txt, {split}.words.{bin,idx} (word ids +
</s>) and {split}.labels.npy (-1 for unlabelled text).  With ``--bert-model`` it
also writes {split}.bert.{bin,idx} (``[CLS] sentence [SEP]`` WordPiece ids, for
``--arch bert_sentence_vae``) and keeps the tokenizer in DATA_DIR/bert_tokenizer.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from fairseq.data import indexed_dataset

from ..modules.bert import load_bert_tokenizer
from .corpus import SPLITS, bert_token_ids, build_vocabulary, encode_sentences, read_corpus


def write_dataset(tensors, path, vocab_size):
    builder = indexed_dataset.make_builder(f"{path}.bin", impl="mmap", vocab_size=vocab_size)
    for tensor in tensors:
        builder.add_item(tensor.to(torch.int32))
    builder.finalize(f"{path}.idx")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--raw", required=True, type=Path, help="directory of train.txt, valid.txt, test.txt")
    parser.add_argument("--destdir", required=True, type=Path, help="DATA_DIR for --task sentence_vae")
    parser.add_argument("--vocab-size", type=int, default=20000,
                        help="words kept, the most frequent in train (default: %(default)s)")
    parser.add_argument("--max-sentence-tokens", type=int, default=200,
                        help="longest sentence accepted (longer: an error naming file and line) (default: %(default)s)")
    parser.add_argument("--bert-model", help="also write BERT WordPiece ids (for --arch bert_sentence_vae)")
    args = parser.parse_args(argv)
    try:
        corpora = {split: read_corpus(args.raw / f"{split}.txt", args.max_sentence_tokens) for split in SPLITS}
        tokenizer = load_bert_tokenizer(args.bert_model) if args.bert_model else None
        bert_ids = {split: bert_token_ids(corpora[split][0], tokenizer, args.raw / f"{split}.txt")
                    for split in SPLITS} if tokenizer is not None else {}
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(str(e)) from None
    dictionary = build_vocabulary(corpora["train"][0], args.vocab_size)
    args.destdir.mkdir(parents=True, exist_ok=True)
    dictionary.save(str(args.destdir / "dict.txt"))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(args.destdir / "bert_tokenizer"))
    for split in SPLITS:
        sentences, labels = corpora[split]
        write_dataset(encode_sentences(sentences, dictionary), args.destdir / f"{split}.words", len(dictionary))
        np.save(args.destdir / f"{split}.labels.npy",
                np.array(labels if labels is not None else [-1] * len(sentences), dtype=np.int64))
        if tokenizer is not None:
            write_dataset(bert_ids[split], args.destdir / f"{split}.bert", len(tokenizer.get_vocab()))
        print(f"{split}: {len(sentences)} sentences{' with labels' if labels is not None else ''}", file=sys.stderr)
    print(f"binarized sentence_vae data in {args.destdir} (vocabulary {len(dictionary)})", file=sys.stderr)


if __name__ == "__main__":
    main()
