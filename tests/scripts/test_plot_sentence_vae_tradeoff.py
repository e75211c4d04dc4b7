"""The sparse-against-informative figure: what it draws, and the table's errors."""

import pytest

from fairseq_sparse.sentence_vae.figures import plot, read_table, styles
from tests.conftest import run_script

HEADER = "run\tepoch\taverage_hoyer\taccuracy\n"


def test_each_run_is_drawn_through_its_epochs_in_order(tmp_path):
    table = tmp_path / "t.tsv"
    table.write_text("# measured somewhere\n" + HEADER + "vae\t2\t0.236\t29.04\nhsvae\t1\t0.5\t21.0\n"
                     "vae\t1\t0.233\t26.06\n\nhsvae\t3\t0.36\t28.4\nhsvae\t2\t0.42\t25.5\n", encoding="utf-8")
    runs = read_table(table)
    assert runs == {"vae": [(1, 0.233, 26.06), (2, 0.236, 29.04)],
                    "hsvae": [(1, 0.5, 21.0), (2, 0.42, 25.5), (3, 0.36, 28.4)]}
    drawn = plot(runs, tmp_path / "f.png", chance=10)
    assert drawn == {"vae": ([0.233, 0.236], [26.06, 29.04]), "hsvae": ([0.5, 0.42, 0.36], [21.0, 25.5, 28.4])}
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("count", [3, 12, 25])
def test_every_run_gets_its_own_colour_and_style(count):
    # The default cycle has 10 colours: the 11th run used to share the first one's.
    drawn = styles(count)
    assert len(drawn) == count and len(set(drawn)) == count
    assert [style for _, style, _ in drawn] == ["-"] * min(count, 20) + ["--"] * max(0, count - 20)
    assert [marker for _, _, marker in drawn] == ["o"] * min(count, 20) + ["s"] * max(0, count - 20)


@pytest.mark.parametrize("body, message", [
    ("run\tepoch\thoyer\taccuracy\n", "line 1: the header must be"),
    (HEADER + "vae\t1\t0.2\n", "line 2: 3 tab-separated fields, expected 4"),
    (HEADER + "vae\tone\t0.2\t30\n", "line 2: epoch must be an integer"),
    (HEADER + "vae\t1\t0.2\tnan\n", r"line 2: epoch at least 1, average Hoyer in \[0, 1\], accuracy in \[0, 100\]"),
    (HEADER + "vae\t1\t1.2\t30\n", r"line 2: epoch at least 1, average Hoyer in \[0, 1\]"),
    (HEADER + "vae\t1\t0.2\t30\nvae\t1\t0.2\t31\n", "line 3: run 'vae' has epoch 1 twice"),
    ("# nothing\n", "no header and figures"),
])
def test_a_bad_table_is_named_with_its_line(tmp_path, body, message):
    table = tmp_path / "bad.tsv"
    table.write_text(body, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as error:
        read_table(table)
    assert str(table) in str(error.value)


def test_the_command_names_a_bad_line_and_writes_nothing(tmp_path):
    table = tmp_path / "bad.tsv"
    table.write_text(HEADER + "vae\t1\t0.2\n", encoding="utf-8")
    cli = run_script("plot_sentence_vae_tradeoff.py", table, "--out", tmp_path / "f.png")
    assert cli.returncode == 2 and f"{table}, line 2: 3 tab-separated fields" in cli.stderr
    assert not (tmp_path / "f.png").exists()
