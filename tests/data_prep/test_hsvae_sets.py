"""The HSVAE paper's Yahoo and DBpedia sets: labels read from their own files, the
paper's valid set split into train and a held-out valid, and fairseq-train reading it."""

from collections import Counter

import pytest

from fairseq_sparse.sentence_vae.corpus import read_corpus
from tests.conftest import REPO, run_cli, run_script, shared_data, valid_metrics


def prepare(source, out, *extra):
    return run_script("data_prep/hsvae_sets.py", source, out, *extra)


@pytest.mark.parametrize("name,classes", [("hsvae-yahoo10", 10), ("hsvae-dbpedia14", 14)])
def test_prepared_splits_are_balanced_disjoint_and_aligned(name, classes, tmp_path):
    source = shared_data("text", name)
    proc = prepare(source, tmp_path / "raw", "--valid-per-class", "50", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    paper_valid = read_corpus(source / "valid.txt", 10**6)
    pairs = Counter((" ".join(s), label) for s, label in zip(*paper_valid))
    split = {}
    for part in ("train", "valid", "test"):
        sentences, labels = read_corpus(tmp_path / "raw" / f"{part}.txt", 10**6)
        split[part] = Counter((" ".join(s), label) for s, label in zip(sentences, labels))
        assert sorted(Counter(labels).values()) == [{"train": 950, "valid": 50, "test": 500}[part]] * classes
    # train + valid is the paper's valid set, pair for pair (text with its own label).
    assert split["train"] + split["valid"] == pairs
    assert split["test"] == Counter((" ".join(s), label) for s, label in zip(*read_corpus(source / "test.txt", 10**6)))


def test_unlabelled_text_joins_train_in_the_sets_spelling_and_never_a_test_sentence(tmp_path):
    source = shared_data("text", "hsvae-yahoo10")
    test_sentence = (source / "test.txt").read_text(encoding="utf-8").splitlines()[7]
    valid_sentence = (source / "valid.txt").read_text(encoding="utf-8").splitlines()[11]
    extra = tmp_path / "extra.txt"
    extra.write_text(f"what is the zzqx of a cat ?\n{test_sentence}\nwhere is the moon ?\n{valid_sentence}\n"
                     "where is the moon ?\n", encoding="utf-8")
    proc = prepare(source, tmp_path / "raw", "--unlabelled", extra)
    assert proc.returncode == 0, proc.stderr
    assert "2 sentences taken, 3 left out" in proc.stderr
    sentences, labels = read_corpus(tmp_path / "raw" / "train.txt", 10**6)
    assert len(sentences) == 9002 and labels[-2:] == [-1, -1] and min(labels[:-2]) >= 0
    # A word outside the set's vocabulary is spelled as the set spells it.
    assert [" ".join(s) for s in sentences[-2:]] == ["what is the _UNK of a cat ?", "where is the moon ?"]
    assert -1 not in read_corpus(tmp_path / "raw" / "valid.txt", 10**6)[1]


def test_label_files_are_checked(tmp_path):
    (tmp_path / "train.txt").write_text("a b\nc d\n")
    (tmp_path / "train_labels.txt").write_text("1\n0\n")
    assert read_corpus(tmp_path / "train.txt", 10) == ([["a", "b"], ["c", "d"]], [1, 0])
    (tmp_path / "train_labels.txt").write_text("-1\n0\n")  # -1: a sentence without a label
    assert read_corpus(tmp_path / "train.txt", 10)[1] == [-1, 0]
    (tmp_path / "train_labels.txt").write_text("1\n-2\n")
    with pytest.raises(ValueError, match=r"train_labels.txt:2: '-2' is not a class id .* or -1 for no label"):
        read_corpus(tmp_path / "train.txt", 10)
    (tmp_path / "train_labels.txt").write_text("1\nx\n")
    with pytest.raises(ValueError, match=r"train_labels.txt:2: 'x' is not a class id"):
        read_corpus(tmp_path / "train.txt", 10)
    (tmp_path / "train_labels.txt").write_text("1\n")
    with pytest.raises(ValueError, match=r"train_labels.txt has 1 labels but .*train.txt has 2 sentences"):
        read_corpus(tmp_path / "train.txt", 10)


def test_sentence_vae_trains_on_a_prepared_set(tmp_path):
    raw = tmp_path / "raw"
    assert prepare(shared_data("text", "hsvae-yahoo10"), raw).returncode == 0
    proc = run_cli("fairseq-train", raw, "--user-dir", REPO / "fairseq_sparse", "--task", "sentence_vae",
                   "--arch", "sentence_vae", "--criterion", "hsvae", "--optimizer", "adam", "--lr", "1e-3",
                   "--batch-size", "64", "--cpu", "--num-workers", "0", "--no-save", "--log-format", "simple",
                   "--embed-dim", "32", "--hidden-dim", "64", "--latent-dim", "8", "--max-update", "3",
                   cwd=tmp_path)
    assert "9000 train, 1000 valid, 5000 test sentences with class labels" in proc.stdout
    assert valid_metrics(proc.stdout)["reconstruction"] > 0


def test_a_negative_valid_share_is_refused_by_option(tmp_path):
    proc = run_script("data_prep/hsvae_sets.py", tmp_path, tmp_path / "out", "--valid-per-class", "-3", check=False)
    assert proc.returncode == 2 and "argument --valid-per-class: must be at least 1, not -3" in proc.stderr
