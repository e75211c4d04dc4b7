"""The HSVAE paper's balanced sets (Prokhorov et al. 2021) as ``--task sentence_vae`` data.

    python data_prep/hsvae_sets.py ../shared/data/text/hsvae-yahoo10 OUT_DIR [--valid-per-class 100] [--seed 0]

The offline copies (``hsvae-yahoo10``: 10 classes, ``hsvae-dbpedia14``: 14) hold the
paper's ``valid.txt`` (1,000 sentences per class) and ``test.txt`` (500 per class),
lowercased, tokenised and cut to its 20K vocabulary (``_UNK``), each with
``*_labels.txt`` (one class id per line); the paper's 100K training files are not
available offline.  So the paper's valid set is trained on: OUT_DIR gets ``train.txt``
(its sentences but ``--valid-per-class`` per class, drawn by ``--seed``), ``valid.txt``
(those held out, for choosing settings), ``test.txt`` (the paper's test set, never
tuned on), each with its ``{split}_labels.txt``, which ``--task sentence_vae`` and
``fairseq-sparse-sentence-vae-binarize`` read beside the text.
"""

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

# Run as a script from anywhere: the package's reader checks the files.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fairseq_sparse.vae.task import read_corpus  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="an HSVAE set: valid.txt, test.txt and their *_labels.txt")
    parser.add_argument("out", type=Path, help="directory for train/valid/test.txt and *_labels.txt")
    parser.add_argument("--valid-per-class", type=int, default=100,
                        help="sentences per class held out of the paper's valid set (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="which sentences are held out (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        sentences, labels = read_corpus(args.source / "valid.txt", max_tokens=10**6)
        test_sentences, _ = read_corpus(args.source / "test.txt", max_tokens=10**6)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(str(e)) from None
    if labels is None:
        raise SystemExit(f"{args.source / 'valid_labels.txt'} is missing: the HSVAE sets keep labels beside the text")
    labels = np.array(labels)
    rng = np.random.default_rng(args.seed)
    held = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        if len(members) <= args.valid_per_class:
            raise SystemExit(f"{args.source / 'valid_labels.txt'}: class {c} has {len(members)} sentences, "
                             f"not more than --valid-per-class {args.valid_per_class}")
        held[rng.choice(members, args.valid_per_class, replace=False)] = True
    args.out.mkdir(parents=True, exist_ok=True)
    for split, keep in (("train", ~held), ("valid", held)):
        rows = np.flatnonzero(keep)
        (args.out / f"{split}.txt").write_text("".join(" ".join(sentences[i]) + "\n" for i in rows), encoding="utf-8")
        (args.out / f"{split}_labels.txt").write_text("".join(f"{labels[i]}\n" for i in rows))
    for name in ("test.txt", "test_labels.txt"):
        shutil.copyfile(args.source / name, args.out / name)
    print(f"{args.out}: train {int((~held).sum())}, valid {int(held.sum())} (of the paper's valid set), "
          f"test {len(test_sentences)} (the paper's test set)", file=sys.stderr)


if __name__ == "__main__":
    main()
