"""The one rule for reading lines of text (fairseq_sparse.text), and every reader of the
package following it."""

import subprocess

import pytest

from fairseq_sparse.text import read_lines
from tests.conftest import run_cli

SENTENCES = ["ein Hund", "zwei Katzen", "drei Vögel", "vier Fische", "fünf Pferde"]


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_line_ends(tmp_path, end):
    path = tmp_path / "x.txt"
    path.write_bytes(end.join(SENTENCES).encode() + end.encode())
    assert list(read_lines(path)) == SENTENCES


def test_separators_inside_a_line_stay(tmp_path):
    lines = ["a\u2028b", "c\rd", "e\u0085f", "g\x0ch", "i\x1ej"]
    path = tmp_path / "x.txt"
    path.write_bytes("\n".join(lines).encode())  # no final line end: still five lines
    assert list(read_lines(path)) == lines


def test_non_utf8_names_its_line_and_byte(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes(b"one\ntwo\nthree\nfo\xffur\n")
    with pytest.raises(ValueError, match=r"x.txt:4: not UTF-8 \(invalid start byte at byte 2 of the line\)"):
        list(read_lines(path))


@pytest.mark.parametrize("content, error", [(b"", r"x.txt: empty file"), (b"a\n\nb\n", r"x.txt:2: empty line"),
                                            (b"a\r \rb\r", r"x.txt:2: empty line")])
def test_empty_refused_unless_allowed(tmp_path, content, error):
    path = tmp_path / "x.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=error):
        list(read_lines(path))
    assert list(read_lines(path, allow_empty=True)) == [line for line in content.decode().replace("\r", "\n").split("\n")][:-1]


def test_sentence_vae_corpus_reads_cr_only_files(tmp_path):
    from fairseq_sparse.sentence_vae.corpus import read_corpus

    path = tmp_path / "valid.txt"
    path.write_bytes("\r".join(SENTENCES).encode() + b"\r")
    words, labels = read_corpus(path, max_tokens=50)
    assert [" ".join(w) for w in words] == SENTENCES and labels is None
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="valid.txt: empty file"):
        read_corpus(path, max_tokens=50)


def test_classifier_reads_by_the_rule(tmp_path):
    from fairseq_sparse.hf.experiment_classifier import read_labelled

    (tmp_path / "t.txt").write_bytes("a\u2028b\nc\n".encode())
    (tmp_path / "l.txt").write_text("3\n4\n")
    assert read_labelled(tmp_path / "t.txt", tmp_path / "l.txt") == (["a\u2028b", "c"], [3, 4])
    (tmp_path / "l.txt").write_text("3\nx\n")
    with pytest.raises(SystemExit, match=r"l.txt:2: 'x' is not a class id"):
        read_labelled(tmp_path / "t.txt", tmp_path / "l.txt")


def test_multi30k_references_keep_their_lines(tmp_path, monkeypatch):
    """A U+2028 inside a reference does not shift the later references."""
    from fairseq_sparse.sparse_transformer import experiment_multi30k

    refs = ["a man in a red shirt\u2028rides a bike", "a dog runs across the green field", "two cats sit on a wall"]
    (tmp_path / "ref.de").write_text("\n".join(refs) + "\n", encoding="utf-8")
    output = "".join(f"D-{i}\t0.0\t{r}\n" for i, r in enumerate(refs))
    monkeypatch.setattr(experiment_multi30k.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, output, ""))
    score, _, missing = experiment_multi30k.bleu(tmp_path, tmp_path / "ckpt.pt", tmp_path / "ref.de", type("A", (), {"device": "cpu"}))
    assert missing == 0 and score == pytest.approx(100.0)


def score_ape(tmp_path, hyp, mt, pe):
    for name, lines in (("hyp", hyp), ("mt", mt), ("pe", pe)):
        (tmp_path / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return run_cli("fairseq-sparse-score-ape", "--hyp", tmp_path / "hyp", "--mt", tmp_path / "mt", "--pe", tmp_path / "pe",
                   check=False)


def test_score_ape_refuses_empty_references_and_says_empty_post_edits(tmp_path):
    proc = score_ape(tmp_path, ["a b", "c d"], ["a b", "c d"], ["a b", ""])
    assert proc.returncode != 0 and "pe:2: empty line" in proc.stderr
    proc = score_ape(tmp_path, ["a b", ""], ["a b", "c d"], ["a b", "c e"])
    assert proc.returncode == 0, proc.stderr
    assert "1 of 2 post-edits" in proc.stderr and "are empty (lines [2])" in proc.stderr
