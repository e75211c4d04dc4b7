"""The APE triplet corpora (fairseq_sparse.ape.triplets): finding a released corpus by
name, reading it checked, holding out its last triplets."""

import pytest

from fairseq_sparse.ape.triplets import find_corpus, held_out, read_corpus, write_triplets
from tests.conftest import shared_data


def test_find_corpus_finds_released_names_and_refuses_two(tmp_path):
    pharma = shared_data("ape", "wmt17-de-en-pharma")
    assert find_corpus(pharma, "train") == pharma / "de-en.train"
    assert find_corpus(pharma, "dev") is None
    wiki = shared_data("ape", "wmt20-en-de-wiki")
    assert (find_corpus(wiki, "train"), find_corpus(wiki, "dev")) == (wiki / "train", wiki / "dev")
    (tmp_path / "pretrain.src").write_text("x\n")  # not a training corpus: the name only ends in "train"
    assert find_corpus(tmp_path, "train") is None
    for name in ("train.src", "de-en.train.src"):
        (tmp_path / name).write_text("x\n")
    with pytest.raises(SystemExit, match=r"more than one train corpus \(de-en.train.\*, train.\*\)"):
        find_corpus(tmp_path, "train")


def test_read_corpus_and_held_out_split_real_triplets_in_order(tmp_path):
    texts = read_corpus(shared_data("ape", "wmt17-de-en-pharma") / "de-en.train")
    assert {field: len(lines) for field, lines in texts.items()} == {"src": 25000, "mt": 25000, "pe": 25000}
    rest, last = held_out(texts, 1000, "--dev-size")
    for field in ("src", "mt", "pe"):
        assert rest[field] + last[field] == texts[field] and len(last[field]) == 1000
    write_triplets(tmp_path / "data", "test", last)
    assert read_corpus(tmp_path / "data" / "test") == last
    for size in (0, 25000):
        with pytest.raises(SystemExit, match=rf"--dev-size {size}: must be at least 1 and below the corpus's 25000"):
            held_out(texts, size, "--dev-size")


def test_read_corpus_names_the_bad_file(tmp_path):
    with pytest.raises(SystemExit, match=r"corpus.src: missing \(see the data README\)"):
        read_corpus(tmp_path / "corpus", " (see the data README)")
    for field, text in (("src", "a\nb\n"), ("mt", "a\n"), ("pe", "a\nb\n")):
        (tmp_path / f"corpus.{field}").write_text(text)
    with pytest.raises(SystemExit, match=r"not line-aligned: .*corpus.src has 2, .*corpus.mt has 1"):
        read_corpus(tmp_path / "corpus")
