"""Official MT releases -> plain parallel text {train,valid,test}.{src,tgt} for prepare_translation.py.

    python data_prep/extract_corpus.py iwslt14 ORIG OUT   # ORIG holds the unpacked de-en.tgz
    python data_prep/extract_corpus.py wmt14 ORIG OUT     # ORIG holds the unpacked WMT14 archives

The splits follow fairseq's own recipes (examples/translation/prepare-iwslt14.sh and
prepare-wmt14en2de.sh), minus their Moses tokenisation, lowercasing and BPE: we keep
the text as released and let sentencepiece segment it, so that BLEU is computed by
sacrebleu on detokenised output.

- IWSLT14 de-en: training talks from train.tags.de-en.* without the metadata lines
  (<url>, <talkid>, <keywords>; <title> and <description> keep their text); every
  23rd training pair is held out as valid; test = TED dev2010 + TEDX dev2012 + TED
  tst2010-2012 (the <seg> lines of their XML).
- WMT14 en-de: Europarl v7 + Common Crawl + News Commentary v12; valid =
  newstest2013; test = newstest2014 (full, from the SGML).

Training pairs are cleaned like Moses' clean-corpus-n (fairseq's recipes: 1-175 or
1-250 words per side, length ratio <= 1.5); what was dropped is counted and printed.
"""

import argparse
import re
import sys
from pathlib import Path

from fairseq_sparse.text import read_lines as read_text_lines

IWSLT_DROP = ("<url>", "<talkid>", "<keywords>")
IWSLT_STRIP = re.compile(r"</?(title|description)>")
SEG = re.compile(r"<seg id=\"?\d+\"?>\s*(.*?)\s*</seg>")


def read_lines(path):
    """The lines of a released file by the package's one rule (fairseq_sparse.text): Common
    Crawl's stray "\r" and Unicode line separators stay inside their sentences; empty lines
    are kept here, since clean() drops the pairs they leave empty and counts them."""
    if not path.is_file():
        raise SystemExit(f"missing {path}: is the archive complete?")
    try:
        return list(read_text_lines(path, allow_empty=True))
    except ValueError as e:
        raise SystemExit(str(e)) from None


def segments(path):
    """The text of each <seg> of an IWSLT XML or WMT SGML file, in order."""
    return [m.group(1) for line in read_lines(path) for m in [SEG.search(line)] if m]


def parallel(src_lines, tgt_lines, src_path, tgt_path):
    if len(src_lines) != len(tgt_lines):
        raise SystemExit(f"{src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}: not parallel")
    return list(zip(src_lines, tgt_lines))


def clean(pairs, max_words, ratio=1.5):
    """Drop pairs with an empty side, a side over max_words words, or a length ratio over `ratio`."""
    kept, dropped = [], {"empty": 0, "too long": 0, "length ratio": 0}
    for s, t in pairs:
        s, t = " ".join(s.split()), " ".join(t.split())
        ns, nt = len(s.split()), len(t.split())
        if ns == 0 or nt == 0:
            dropped["empty"] += 1
        elif ns > max_words or nt > max_words:
            dropped["too long"] += 1
        elif ns > ratio * nt or nt > ratio * ns:
            dropped["length ratio"] += 1
        else:
            kept.append((s, t))
    detail = ", ".join(f"{n} {why}" for why, n in dropped.items())
    print(f"training pairs: kept {len(kept)} of {len(pairs)} (dropped {detail})", file=sys.stderr)
    return kept


def iwslt14(orig):
    """(train, valid, test) pairs, de -> en."""
    base = orig / "de-en"

    def talk_text(lang):
        path = base / f"train.tags.de-en.{lang}"
        lines = [line for line in read_lines(path) if not any(tag in line for tag in IWSLT_DROP)]
        return [IWSLT_STRIP.sub("", line).strip() for line in lines], path

    (de, de_path), (en, en_path) = talk_text("de"), talk_text("en")
    pairs = clean(parallel(de, en, de_path, en_path), max_words=175)
    valid = [p for i, p in enumerate(pairs, 1) if i % 23 == 0]
    train = [p for i, p in enumerate(pairs, 1) if i % 23 != 0]
    test = []
    for name in ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012"):
        src, tgt = (base / f"IWSLT14.{name}.de-en.{lang}.xml" for lang in ("de", "en"))
        test += parallel(segments(src), segments(tgt), src, tgt)
    return train, valid, test


def wmt14(orig):
    """(train, valid, test) pairs, en -> de."""
    train = []
    for prefix in ("training/europarl-v7.de-en", "commoncrawl.de-en", "training/news-commentary-v12.de-en"):
        en, de = orig / f"{prefix}.en", orig / f"{prefix}.de"
        train += parallel(read_lines(en), read_lines(de), en, de)
    train = clean(train, max_words=250)
    en, de = orig / "dev" / "newstest2013.en", orig / "dev" / "newstest2013.de"
    valid = parallel(read_lines(en), read_lines(de), en, de)
    en, de = orig / "test-full" / "newstest2014-deen-src.en.sgm", orig / "test-full" / "newstest2014-deen-ref.de.sgm"
    test = parallel(segments(en), segments(de), en, de)
    return train, valid, test


CORPORA = {"iwslt14": (iwslt14, "de", "en"), "wmt14": (wmt14, "en", "de")}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", choices=sorted(CORPORA))
    parser.add_argument("orig", type=Path, help="directory with the unpacked official archives")
    parser.add_argument("out", type=Path, help="where {train,valid,test}.{src,tgt} are written")
    args = parser.parse_args(argv)
    extract, src, tgt = CORPORA[args.corpus]
    splits = dict(zip(("train", "valid", "test"), extract(args.orig)))
    args.out.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        if not pairs:
            raise SystemExit(f"{args.corpus}: the {split} split came out empty; check the archives in {args.orig}")
        for lang, side in ((src, 0), (tgt, 1)):
            text = "\n".join(" ".join(p[side].split()) for p in pairs) + "\n"
            (args.out / f"{split}.{lang}").write_text(text, encoding="utf-8")
        print(f"{split}: {len(pairs)} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
