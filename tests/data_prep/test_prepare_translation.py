"""The Multi30k pipeline against a local mirror (a slice of ../shared/data), and its input checks."""

import subprocess

from tests.conftest import REPO, pipeline_env, run_script, shared_data

BASH = ["bash", str(REPO / "data_prep" / "multi30k.sh")]


def mirror(tmp_path, n=400, held_out=None):
    """The first n sentence pairs of each Multi30k split (of val and test, `held_out` if given)."""
    src = shared_data("mt", "multi30k-en-de")
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de"):
            size = n if held_out is None or name == "train" else held_out
            lines = (src / f"{name}.{lang}").read_text(encoding="utf-8").splitlines()[:size]
            (raw / f"{name}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return raw


def prepare(out, raw):
    """Run the pipeline as a user would (no environment activated)."""
    proc = subprocess.run(BASH + [str(out), str(raw)], capture_output=True, text=True, env=pipeline_env())
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_multi30k_pipeline_on_a_local_mirror(multi30k_prepared):
    raw, out = multi30k_prepared
    for split in ("train", "valid", "test"):
        assert (out / "bin" / f"{split}.en-de.en.bin").stat().st_size > 0
    assert (out / "test.raw.de").read_text() == (raw / "test_2016_flickr.de").read_text()
    first = (out / "train.spm.de").read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("\u2581")  # sentencepiece pieces


def test_non_parallel_or_empty_lines_name_the_file(tmp_path):
    raw = mirror(tmp_path, n=50)
    with (raw / "train.de").open("a", encoding="utf-8") as f:
        f.write("one line too many\n")
    proc = run_script("data_prep/prepare_translation.py", "--raw", raw, "--src", "en", "--tgt", "de", "--out",
                      tmp_path / "o", "--valid", "val", "--test", "test_2016_flickr")
    assert proc.returncode != 0 and "train.de has 51" in proc.stderr and "not parallel" in proc.stderr
    (raw / "train.de").write_text("\n".join(["x"] * 25 + [""] + ["y"] * 24) + "\n", encoding="utf-8")
    proc = run_script("data_prep/prepare_translation.py", "--raw", raw, "--src", "en", "--tgt", "de", "--out",
                      tmp_path / "o", "--valid", "val", "--test", "test_2016_flickr")
    assert proc.returncode != 0 and "train.de:26: empty line" in proc.stderr


def test_a_raw_dir_without_the_release_is_an_error_not_a_download(tmp_path):
    """A wrong RAW_DIR was ignored for a download (with internet: another corpus than the user's)."""
    proc = subprocess.run(BASH + [str(tmp_path / "out"), str(tmp_path / "typo")], capture_output=True, text=True)
    assert proc.returncode != 0 and f"RAW_DIR {tmp_path / 'typo'} has no train.en" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_vocabulary_of_nothing_is_refused_by_option(tmp_path):
    proc = run_script("data_prep/prepare_translation.py", "--raw", tmp_path, "--src", "en", "--tgt", "de", "--out",
                      tmp_path / "o", "--vocab-size", "0")
    assert proc.returncode == 2 and "argument --vocab-size: must be at least 2, not 0" in proc.stderr
