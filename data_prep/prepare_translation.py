"""Raw parallel text -> joint sentencepiece -> fairseq binary data (the steps every MT pipeline shares).

    python data_prep/prepare_translation.py --raw RAW --src en --tgt de --out OUT \\
        --train train --valid val --test test_2016_flickr [--vocab-size 8000]

RAW holds {split}.{lang} files of untokenised sentences, one per line.  Writes
OUT/spm.{model,vocab} (one joint model trained on the training text of both
languages), OUT/{train,valid,test}.spm.{src,tgt} and OUT/bin (fairseq-preprocess,
joined dictionary), plus OUT/test.raw.{tgt} for scoring detokenised output.
"""

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import sentencepiece as spm

from fairseq_sparse.configs import at_least


def check_parallel(raw, split, src, tgt):
    paths = [raw / f"{split}.{lang}" for lang in (src, tgt)]
    for p in paths:
        if not p.is_file():
            raise SystemExit(f"missing {p}")
    counts = [sum(1 for _ in lines(p)) for p in paths]
    if counts[0] != counts[1]:
        raise SystemExit(f"{paths[0]} has {counts[0]} lines but {paths[1]} has {counts[1]}: not parallel")
    for p in paths:
        for n, line in enumerate(lines(p), 1):
            if not line.strip():
                raise SystemExit(f"{p}:{n}: empty line (fairseq-preprocess would misalign the corpus)")
    return paths


def lines(path):
    """The lines of a UTF-8 file, split at "\n" only (as fairseq-preprocess reads them)."""
    n = 0
    with path.open(encoding="utf-8", newline="\n") as f:
        try:
            for n, line in enumerate(f, 1):
                yield line.rstrip("\n")
        except UnicodeDecodeError as e:
            # Decoding runs ahead of the lines read, so the position is approximate.
            raise SystemExit(f"{path}: not UTF-8, near line {n + 1} ({e})") from None


def encode(sp, path, out, chunk=100_000):
    """Write the sentencepiece pieces of each line of `path` to `out`, a chunk at a time."""
    with out.open("w", encoding="utf-8") as f:
        batch = []
        for line in lines(path):
            batch.append(line)
            if len(batch) == chunk:
                f.writelines(" ".join(p) + "\n" for p in sp.encode(batch, out_type=str))
                batch = []
        f.writelines(" ".join(p) + "\n" for p in sp.encode(batch, out_type=str))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--raw", required=True, type=Path, help="directory of untokenised {split}.{lang} files")
    parser.add_argument("--src", required=True, help="source language suffix, e.g. en")
    parser.add_argument("--tgt", required=True, help="target language suffix, e.g. de")
    parser.add_argument("--out", required=True, type=Path,
                        help="where the sentencepiece model, the encoded text and bin/ (fairseq-preprocess) go")
    parser.add_argument("--train", default="train", help="training split's name in RAW (default: %(default)s)")
    parser.add_argument("--valid", default="valid", help="validation split's name in RAW (default: %(default)s)")
    parser.add_argument("--test", default="test", help="test split's name in RAW (default: %(default)s)")
    parser.add_argument("--vocab-size", type=at_least(2), default=8000,
                        help="joint sentencepiece vocabulary size (default: %(default)s)")
    parser.add_argument("--workers", type=at_least(1), default=2,
                        help="fairseq-preprocess worker processes (default: %(default)s)")
    args = parser.parse_args(argv)

    splits = {"train": args.train, "valid": args.valid, "test": args.test}
    files = {name: check_parallel(args.raw, split, args.src, args.tgt) for name, split in splits.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    prefix = args.out / "spm"
    spm.SentencePieceTrainer.train(
        input=",".join(str(p) for p in files["train"]), model_prefix=str(prefix), vocab_size=args.vocab_size,
        character_coverage=1.0, model_type="unigram", input_sentence_size=2_000_000, shuffle_input_sentence=True,
        bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1,
        hard_vocab_limit=False,  # a small corpus (or a test mirror) gets a smaller vocabulary, not an error
    )
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    for name, (src_file, tgt_file) in files.items():
        for lang, path in ((args.src, src_file), (args.tgt, tgt_file)):
            encode(sp, path, args.out / f"{name}.spm.{lang}")
    shutil.copy(files["test"][1], args.out / f"test.raw.{args.tgt}")
    shutil.copy(files["valid"][1], args.out / f"valid.raw.{args.tgt}")
    # fairseq-preprocess refuses an existing dictionary; a rerun rebuilds the binaries.
    shutil.rmtree(args.out / "bin", ignore_errors=True)
    subprocess.run(
        [str(Path(sys.executable).parent / "fairseq-preprocess"), "--source-lang", args.src, "--target-lang", args.tgt,
         "--trainpref", str(args.out / "train.spm"), "--validpref", str(args.out / "valid.spm"),
         "--testpref", str(args.out / "test.spm"), "--destdir", str(args.out / "bin"), "--joined-dictionary",
         "--workers", str(args.workers)],
        check=True,
    )
    print(f"binarized data in {args.out / 'bin'}")


if __name__ == "__main__":
    main()
