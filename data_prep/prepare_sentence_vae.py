"""Labelled sentence corpora for the sentence VAEs (Prokhorov et al. 2021, Sec. 5) from
the CSV releases of Zhang, Zhao & LeCun (2015): Yelp review full (5 classes),
Yahoo! Answers (10 classes) and DBpedia ontology (14 classes).

    python data_prep/prepare_sentence_vae.py CORPUS CSV_DIR OUT_DIR [--train-per-class 10000 ...]

CSV_DIR holds the release's ``train.csv`` and ``test.csv``.  Each example's text
(Yelp: the review; Yahoo: the best answer, the documents of Yang et al. 2017's text
VAE; DBpedia: the abstract, not the title, which names the entity) is cleaned
as the paper describes: the release's ``\\n`` escapes become spaces, links and
non-ASCII characters are removed, double quotes dropped; then Moses-tokenised
and lowercased.  The example's first sentence is kept when it has
``--min-tokens``..``--max-tokens`` tokens and has not been seen before.  Per
class, train and valid are drawn from ``train.csv`` and test from ``test.csv``,
in an order fixed by ``--seed``.  OUT_DIR gets ``train.txt``, ``valid.txt`` and
``test.txt``, one ``LABEL sentence`` per line with labels from 0, which is what
``--task sentence_vae`` reads (it keeps the 20,000 most frequent train words).
A class with too few usable examples is an error naming the file and class.
"""

import argparse
import csv
import re
import sys
from pathlib import Path

import numpy as np

# corpus -> (columns after the label, the columns whose text is used)
LAYOUT = {"yelp": (("text",), ("text",)),
          "yahoo": (("title", "question", "answer"), ("answer",)),
          "dbpedia": (("title", "content"), ("content",))}
LINK = re.compile(r"(https?://|www\.)\S+", re.IGNORECASE)
SENTENCE_END = {".", "!", "?"}


def clean(text):
    text = text.replace("\\n", " ").replace('\\"', '"')
    text = LINK.sub(" ", text)
    text = text.encode("ascii", "ignore").decode("ascii")
    return " ".join(text.replace('"', " ").replace("``", " ").replace("''", " ").split())


def first_sentence(tokens):
    for i, token in enumerate(tokens):
        if token in SENTENCE_END:
            # "!!!" or "?!" end one sentence, not several.
            while i + 1 < len(tokens) and tokens[i + 1] in SENTENCE_END:
                i += 1
            return tokens[:i + 1]
    return tokens


def rows(path, corpus):
    """(row number, 0-based label, text) of a release CSV, checked row by row."""
    columns, used = LAYOUT[corpus]
    with open(path, newline="", encoding="utf-8") as f:
        for number, row in enumerate(csv.reader(f), 1):
            if len(row) != 1 + len(columns) or not row[0].isdigit() or int(row[0]) < 1:
                raise ValueError(f"{path}:{number}: expected a class number from 1 and {len(columns)} text "
                                 f"column(s) ({', '.join(columns)}), got {len(row)} columns")
            fields = dict(zip(columns, row[1:]))
            yield number, int(row[0]) - 1, " ".join(fields[c] for c in used)


class Sentences:
    def __init__(self, args):
        from sacremoses import MosesTokenizer

        self.tokenizer = MosesTokenizer(lang="en")
        self.min_tokens, self.max_tokens = args.min_tokens, args.max_tokens

    def __call__(self, text):
        """The cleaned first sentence, or None when it is too short or too long."""
        tokens = self.tokenizer.tokenize(clean(text).lower(), escape=False)
        sentence = first_sentence(tokens)
        if not self.min_tokens <= len(sentence) <= self.max_tokens:
            return None
        return " ".join(sentence)


def draw(path, corpus, counts, sentences, seen, rng):
    """Per class, ``sum(counts)`` distinct usable sentences in a random order of rows;
    returns {class: [sentence, ...]}."""
    labels = np.array([label for _, label, _ in rows(path, corpus)])
    classes = int(labels.max()) + 1
    order = {c: rng.permutation(np.flatnonzero(labels == c)) for c in range(classes)}
    need = sum(counts)
    chosen = {c: [] for c in range(classes)}
    tried = {c: 0 for c in range(classes)}
    while any(len(chosen[c]) < need for c in range(classes)):
        # Clean only a batch of candidates per class (twice what is still missing):
        # tokenising every row of Yahoo's 1.4M would take many minutes.
        batch = set()
        for c in range(classes):
            missing = need - len(chosen[c])
            if missing > 0:
                if tried[c] == len(order[c]):
                    raise ValueError(f"{path}: class {c + 1} has {len(chosen[c])} usable distinct sentences, "
                                     f"{need} needed (per-class counts {counts})")
                batch.update(int(i) for i in order[c][tried[c]:tried[c] + 2 * missing + 10])
        texts = {}
        for number, _, text in rows(path, corpus):
            if number - 1 in batch:
                texts[number - 1] = text
        for c in range(classes):
            for index in order[c][tried[c]:]:
                if int(index) not in batch or len(chosen[c]) == need:
                    break
                tried[c] += 1
                sentence = sentences(texts[int(index)])
                if sentence is not None and sentence not in seen:
                    seen.add(sentence)
                    chosen[c].append(sentence)
    return chosen


def write(path, chosen, start, count):
    with open(path, "w", encoding="utf-8") as f:
        for c in sorted(chosen):
            for sentence in chosen[c][start:start + count]:
                f.write(f"{c} {sentence}\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", choices=sorted(LAYOUT), help="which release CSV_DIR holds")
    parser.add_argument("csv_dir", type=Path, help="the release's directory of train.csv and test.csv")
    parser.add_argument("out", type=Path, help="where train.txt, valid.txt and test.txt are written")
    parser.add_argument("--train-per-class", type=int, default=10000,
                        help="training sentences per class (default: %(default)s)")
    parser.add_argument("--valid-per-class", type=int, default=1000,
                        help="validation sentences per class (default: %(default)s)")
    parser.add_argument("--test-per-class", type=int, default=1000,
                        help="test sentences per class (default: %(default)s)")
    parser.add_argument("--min-tokens", type=int, default=3,
                        help="shortest first sentence kept, in tokens (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=50,
                        help="longest first sentence kept, in tokens (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the order examples are drawn in (default: %(default)s)")
    args = parser.parse_args(argv)
    for name in ("train.csv", "test.csv"):
        if not (args.csv_dir / name).is_file():
            raise SystemExit(f"{args.csv_dir / name}: missing (expected the {args.corpus} CSV release)")
    rng = np.random.default_rng(args.seed)
    sentences, seen = Sentences(args), set()
    try:
        train = draw(args.csv_dir / "train.csv", args.corpus, (args.train_per_class, args.valid_per_class),
                     sentences, seen, rng)
        test = draw(args.csv_dir / "test.csv", args.corpus, (args.test_per_class,), sentences, seen, rng)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / "train.txt", train, 0, args.train_per_class)
    write(args.out / "valid.txt", train, args.train_per_class, args.valid_per_class)
    write(args.out / "test.txt", test, 0, args.test_per_class)
    print(f"[prepare_sentence_vae] {args.corpus}: {len(train)} classes; per class {args.train_per_class} train, "
          f"{args.valid_per_class} valid, {args.test_per_class} test sentences in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
