"""Binarize APE triplets for the ``ape`` task (fairseq's memory-mapped datasets).

    fairseq-sparse-ape-binarize --bert-model PATH --raw RAW_DIR --destdir DATA_DIR [--splits train valid test]

Reads RAW_DIR/{split}.{src,mt,pe} a chunk at a time (millions of triplets never sit
in Python memory at once), tokenises them with the BERT checkpoint's WordPiece
tokenizer exactly as the task does for raw text, and writes
DATA_DIR/{split}.input.{bin,idx} ([CLS] src [SEP] mt [SEP]) and
DATA_DIR/{split}.pe.{bin,idx} (pe [SEP]), plus DATA_DIR/tokenizer.  Line counts must
agree; the first misaligned or undecodable line is reported with its file and line.
"""

import argparse
import itertools
import logging
import sys
from pathlib import Path

import torch
from fairseq.data import indexed_dataset

from ..modules.bert import load_bert_tokenizer
from .triplets import FIELDS, encode_triplets, read_lines

logger = logging.getLogger(__name__)


def chunks_of_triplets(raw, split, size):
    """Yield {field: [lines]} chunks of RAW/{split}.{src,mt,pe}, checking alignment as it goes."""
    return aligned_chunks({name: raw / f"{split}.{name}" for name in FIELDS}, size)


def aligned_chunks(paths, size, allow_empty=False):
    """Yield {field: [lines]} chunks of line-aligned files ({field: path}), read as
    :func:`~.triplets.read_lines` reads them; a missing, empty, non-UTF-8 or shorter file,
    or an empty line (unless ``allow_empty``), stops with its name (and line)."""
    for path in paths.values():
        if not path.is_file():
            raise SystemExit(f"{path}: missing")
        if path.stat().st_size == 0:
            raise SystemExit(f"{path}: empty file")
    lines = {name: read_lines(path, allow_empty) for name, path in paths.items()}
    line = 0
    while True:
        chunk = {}
        for name, source in lines.items():
            try:
                chunk[name] = list(itertools.islice(source, size))
            except ValueError as e:  # an empty line or undecodable text, with its file and line
                raise SystemExit(str(e)) from None
        lengths = {len(v) for v in chunk.values()}
        if len(lengths) != 1:
            short = min(chunk, key=lambda n: len(chunk[n]))
            longer = max(chunk, key=lambda n: len(chunk[n]))
            raise SystemExit(f"{paths[short]} ends at line {line + len(chunk[short])} but {paths[longer]} "
                             f"goes on: not line-aligned")
        n = lengths.pop()
        if n == 0:
            return
        line += n
        yield chunk


def binarize_split(tokenizer, raw, split, destdir, max_tokens, chunk_size=10000):
    vocab_size = len(tokenizer.get_vocab())
    builders = {name: indexed_dataset.make_builder(str(destdir / f"{split}.{name}.bin"), impl="mmap",
                                                   vocab_size=vocab_size) for name in ("input", "pe")}
    total, cut_total = 0, dict.fromkeys(FIELDS, 0)
    for chunk in chunks_of_triplets(raw, split, chunk_size):
        sources, targets, cut = encode_triplets(tokenizer, chunk, max_tokens)
        for s, t in zip(sources, targets):
            builders["input"].add_item(torch.tensor(s, dtype=torch.int32))
            builders["pe"].add_item(torch.tensor(t, dtype=torch.int32))
        total += len(sources)
        for name in FIELDS:
            cut_total[name] += cut[name]
    for name, builder in builders.items():
        builder.finalize(str(destdir / f"{split}.{name}.idx"))
    cuts = ", ".join(f"{n} {name}" for name, n in cut_total.items())
    print(f"{split}: {total} triplets; cut to {max_tokens} WordPieces: {cuts}", file=sys.stderr)
    return total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bert-model", required=True, help="BERT checkpoint directory (or cached model name)")
    parser.add_argument("--raw", required=True, type=Path, help="directory with {split}.{src,mt,pe}")
    parser.add_argument("--destdir", required=True, type=Path,
                        help="DATA_DIR for --task ape: {split}.{input,pe}.{bin,idx} and the tokenizer")
    parser.add_argument("--splits", nargs="+", default=["train", "valid", "test"],
                        help="splits to binarize (default: train valid test)")
    parser.add_argument("--max-segment-tokens", type=int, default=200,
                        help="cut src, mt and pe to this many WordPieces each (counted and reported) "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    if args.max_segment_tokens < 1:
        parser.error(f"--max-segment-tokens {args.max_segment_tokens}: must be at least 1")
    try:
        tokenizer = load_bert_tokenizer(args.bert_model)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(str(e)) from None
    args.destdir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(args.destdir / "tokenizer"))
    for split in args.splits:
        binarize_split(tokenizer, args.raw, split, args.destdir, args.max_segment_tokens)
    print(f"binarized APE data in {args.destdir}", file=sys.stderr)


if __name__ == "__main__":
    main()
