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

``--unlabelled FILE [FILE ...]`` stands in for the paper's 100K training sentences,
which carry no label the VAE uses: each file's sentences (tokenised text, one per
line, e.g. ``../shared/data/text/yahoo/{valid,test}.txt``) join ``train.txt`` with
label -1, their words outside the set's ``vocab.txt`` spelled ``_UNK`` as the set
spells them.  A sentence that is in the set's valid or test file, or repeats one
already taken, is left out, so that no test sentence is trained on; the counts are
printed.
"""

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

# The package's reader checks the files the way the sentence_vae task reads them.
from fairseq_sparse.configs import at_least
from fairseq_sparse.sentence_vae.corpus import read_corpus
from fairseq_sparse.text import read_lines

UNK = "_UNK"  # the HSVAE sets' spelling of a word outside their vocabulary


def unlabelled_sentences(args, kept_out):
    """The sentences of ``args.unlabelled`` in the set's vocabulary, less those of ``kept_out``
    (the set's own sentences) and repeats."""
    vocab_file = args.source / "vocab.txt"
    if not vocab_file.is_file():
        raise SystemExit(f"{vocab_file} is missing: --unlabelled spells other words as the set's _UNK")
    vocabulary = {line.split()[0] for line in read_lines(vocab_file, allow_empty=True) if line.strip()}
    vocabulary.add(UNK)
    seen = {" ".join(words) for words in kept_out}
    taken, dropped = [], 0
    for path in args.unlabelled:
        try:
            corpus, _ = read_corpus(path, max_tokens=10**6)
        except (FileNotFoundError, ValueError) as e:
            raise SystemExit(str(e)) from None
        for words in corpus:
            raw, line = " ".join(words), " ".join(w if w in vocabulary else UNK for w in words)
            if raw in seen or line in seen:
                dropped += 1
                continue
            seen.add(line)
            taken.append(line)
    print(f"--unlabelled: {len(taken)} sentences taken, {dropped} left out (in the set's valid or test file, "
          "or repeated)", file=sys.stderr)
    return taken


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="an HSVAE set: valid.txt, test.txt and their *_labels.txt")
    parser.add_argument("out", type=Path, help="directory for train/valid/test.txt and *_labels.txt")
    parser.add_argument("--valid-per-class", type=at_least(1), default=100,
                        help="sentences per class held out of the paper's valid set (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="which sentences are held out (default: %(default)s)")
    parser.add_argument("--unlabelled", type=Path, nargs="+", default=[],
                        help="tokenised text files whose sentences join train without a label (-1)")
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
    extra = unlabelled_sentences(args, sentences + test_sentences) if args.unlabelled else []
    for split, keep in (("train", ~held), ("valid", held)):
        rows = np.flatnonzero(keep)
        text = [" ".join(sentences[i]) for i in rows] + (extra if split == "train" else [])
        ids = [str(labels[i]) for i in rows] + (["-1"] * len(extra) if split == "train" else [])
        (args.out / f"{split}.txt").write_text("".join(line + "\n" for line in text), encoding="utf-8")
        (args.out / f"{split}_labels.txt").write_text("".join(line + "\n" for line in ids))
    for name in ("test.txt", "test_labels.txt"):
        shutil.copyfile(args.source / name, args.out / name)
    print(f"{args.out}: train {int((~held).sum())} labelled + {len(extra)} unlabelled, valid {int(held.sum())} "
          f"(of the paper's valid set), test {len(test_sentences)} (the paper's test set)", file=sys.stderr)


if __name__ == "__main__":
    main()
