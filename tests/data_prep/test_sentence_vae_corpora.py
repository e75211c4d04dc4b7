"""data_prep/sentence_vae_corpora.sh and prepare_sentence_vae.py against mirrors laid out as
the Zhang et al. (2015) CSV releases, built from real Yelp and Yahoo text."""

import csv
import io
import subprocess
import tarfile
from pathlib import Path

from fairseq_sparse.sentence_vae.corpus import read_corpus
from tests.conftest import REPO, pipeline_env, run_script, shared_data

from prepare_sentence_vae import Sentences, clean

CLASSES = {"yelp_review_full_csv": 5, "yahoo_answers_csv": 10, "dbpedia_csv": 14}


def archive(mirror, name, rows_by_split):
    """NAME.tar.gz holding NAME/train.csv and NAME/test.csv, quoted as the releases are."""
    mirror.mkdir(parents=True, exist_ok=True)
    with tarfile.open(mirror / f"{name}.tar.gz", "w:gz") as tar:
        for split, rows in rows_by_split.items():
            text = io.StringIO()
            csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
            data = text.getvalue().encode("utf-8")
            info = tarfile.TarInfo(f"{name}/{split}.csv")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def build_mirror(mirror, per_class):
    """Real sentences as release rows: the releases' "\\n" escapes, a link, quotes and
    non-ASCII characters added so that the cleaning has work to do."""
    yelp = [line.split(maxsplit=1)[1] for line in
            (shared_data("text", "yelp5") / "test.txt").read_text(encoding="utf-8").splitlines()]
    yahoo = (shared_data("text", "yahoo") / "test.txt").read_text(encoding="utf-8").splitlines()
    texts = iter(t for pair in zip(yelp, yahoo) for t in pair if len(t.split()) > 4)

    def text():
        return f'"Caf\u00e9" {next(texts)} see http://example.com/x?a=1 . \\n More words here.'

    for name, classes in CLASSES.items():
        splits = {}
        for split, count in (("train", per_class + 1), ("test", per_class)):
            rows = []
            for c in range(1, classes + 1):
                for _ in range(count):
                    columns = {"yelp_review_full_csv": [text()], "yahoo_answers_csv": ["a title", "a question", text()],
                               "dbpedia_csv": ["Entity Name", text()]}[name]
                    rows.append([str(c), *columns])
            splits[split] = rows
        archive(mirror, name, splits)


def run(out, mirror, *corpora, **env):
    return subprocess.run(["bash", str(REPO / "data_prep" / "sentence_vae_corpora.sh"), str(out), *corpora],
                          capture_output=True, text=True,
                          env=pipeline_env(MIRROR=mirror, PATH="/usr/bin:/bin", TRAIN_PER_CLASS="2",
                                           VALID_PER_CLASS="1", TEST_PER_CLASS="2", **env))


def test_cleaning_as_the_paper_describes():
    assert clean('Great "caf\u00e9" http://x.org/a?b=1 here\\nnext') == "Great caf here next"
    sentences = Sentences(type("Args", (), {"min_tokens": 3, "max_tokens": 50}))
    assert sentences("I'm HUNGRY!!! Don't go www.x.com. Second one.") == "i 'm hungry ! ! !"
    assert sentences("Short.") is None
    assert sentences(" ".join(["word"] * 51)) is None


def test_pipeline_verifies_prepares_and_the_task_reads_the_result(tmp_path):
    mirror = tmp_path / "mirror"
    build_mirror(mirror, per_class=3)
    proc = run(tmp_path / "checked", mirror, "yelp")
    assert proc.returncode != 0
    assert "yelp_review_full_csv.tar.gz: md5 is" in proc.stderr
    assert "expected f7ddfafed1033f68ec72b9267863af6c" in proc.stderr

    out = tmp_path / "out"
    proc = run(out, mirror, VERIFY="0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for corpus, classes in (("yelp", 5), ("yahoo", 10), ("dbpedia", 14)):
        seen = {}
        for split, per_class in (("train", 2), ("valid", 1), ("test", 2)):
            path = out / corpus / f"{split}.txt"
            text = path.read_text(encoding="ascii")
            assert text == text.lower() and '"' not in text and "http" not in text and "example.com" not in text
            words, labels = read_corpus(path, 200)
            assert sorted(set(labels)) == list(range(classes)) and len(labels) == classes * per_class
            for sentence in map(" ".join, words):
                assert sentence.startswith("caf ") and "more words" not in sentence  # the first sentence only
                assert sentence not in seen, f"{sentence!r} in {split} and {seen.get(sentence)}"
                seen[sentence] = split
    # A rerun finds the archives in place and downloads nothing.
    again = run(out, tmp_path / "empty", VERIFY="0")
    assert again.returncode == 0 and again.stdout.count("already here") == 3


def test_too_few_examples_and_a_malformed_row_are_named(tmp_path):
    mirror = tmp_path / "mirror"
    build_mirror(mirror, per_class=1)
    proc = run(tmp_path / "out", mirror, "yelp", VERIFY="0")
    assert proc.returncode != 0
    assert "train.csv: class 1 has 2 usable distinct sentences, 3 needed" in proc.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "train.csv").write_text('"1","fine text here"\n"2","a","b"\n', encoding="utf-8")
    (broken / "test.csv").write_text('"1","fine text here"\n', encoding="utf-8")
    proc = run_script("data_prep/prepare_sentence_vae.py", "yelp", broken, tmp_path / "o")
    assert proc.returncode != 0 and "train.csv:2: expected a class number from 1 and 1 text column(s)" in proc.stderr
    assert not Path(tmp_path / "o" / "train.txt").exists()


def test_unknown_corpus_is_refused(tmp_path):
    proc = run(tmp_path / "out", tmp_path, "imdb")
    assert proc.returncode == 2 and "unknown corpus 'imdb'" in proc.stderr

