"""The README's main job (scripts/ape_demo.py) end to end, shortened to one epoch of 300
generated triplets and one layer."""

import argparse
import re
import tempfile

import pytest

from fairseq_sparse.ape import demo
from tests.conftest import run_script, shared_data

import ape_demo


def test_main_job_post_edits_and_reports(tmp_path):
    proc = run_script("ape_demo.py", "--workdir", tmp_path, "--max-epoch", "1", "--bert-layers", "1",
                      "--train-size", "300")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "GENERATED corpus (not real data)" in out and "300 / 100 / 200 triplets (train only the first 300)" in out
    assert re.search(r"TER = [0-9.]+ \(signature: nrefs:1\|case:mixed\|tok:tercom", out)
    assert re.search(r"do-nothing \(MT\)\s+11\.03\s+73\.10", out)  # the baseline of the generated test split
    assert re.search(r"post-edited\s+[0-9.]+\s+[0-9.]+", out)
    alpha_rows = re.findall(r"^\s+(encoder|decoder|cross)\s+0\s+((?:[12]\.\d{3}\s+){12})", out, re.M)
    assert {site for site, _ in alpha_rows} == {"encoder", "decoder", "cross"}
    assert all(1.0 < float(a) <= 2.0 for _, row in alpha_rows for a in row.split())
    # Under each layer, how far training moved each head from its initial alpha; the summary's bound is their maximum.
    changes = re.findall(r"^\s+change\s+((?:[-+]\d\.\d{3}\s+){12})", out, re.M)
    assert len(changes) == len(alpha_rows)
    mean, moved = map(float, re.search(r"in \d+ updates training moved them by (\d\.\d{3}) on average and by at "
                                       r"most (\d\.\d{3})", out).groups())
    assert max(abs(float(c)) for row in changes for c in row.split()) == pytest.approx(moved, abs=1e-3)
    # Five updates here (ninety in the main job): at the model's own rate none moved by 0.001.
    assert mean > 0.001 and moved >= 0.005, "the alphas' own learning rate moves them in a short run"
    assert (tmp_path / "checkpoints" / "checkpoint_best.pt").exists()


def test_main_job_removes_its_own_temp_dir_and_keeps_a_workdir(tmp_path, monkeypatch):
    """Without --workdir each run would leave its files (about 470 MB) in /tmp: they go when it
    succeeds; when a step fails its checkpoints go and its logs stay; a --workdir keeps
    everything.  The steps are stubbed: the end-to-end run above covers them."""
    def fake_training(args, data, work):
        (work / "checkpoints").mkdir()
        (work / "checkpoints" / "checkpoint_best.pt").write_bytes(b"weights")
        (work / "train.log").write_text("log")
        return work / "checkpoints" / "checkpoint_best.pt"

    for step in ("prepare_data", "choose_decoding", "post_edit", "score", "show_alphas"):
        monkeypatch.setattr(demo, step, lambda *args: (None, None))
    monkeypatch.setattr(demo, "train", fake_training)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    ape_demo.main([])
    assert not any((tmp_path / "tmp").iterdir()), "a successful run leaves nothing in /tmp"

    def failing(*args):
        raise RuntimeError("generation failed")

    monkeypatch.setattr(demo, "score", failing)
    with pytest.raises(RuntimeError, match="generation failed"):
        ape_demo.main([])
    (work,) = (tmp_path / "tmp").iterdir()
    assert (work / "train.log").exists() and not (work / "checkpoints").exists()
    monkeypatch.setattr(demo, "score", lambda *args: None)
    ape_demo.main(["--workdir", str(tmp_path / "mine")])
    assert (tmp_path / "mine" / "checkpoints" / "checkpoint_best.pt").exists()


def demo_data(tmp_path, data, held_out=500, train_size=0):
    args = argparse.Namespace(data=data, held_out=held_out, train_size=train_size)
    return demo.real_data(args, tmp_path)


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_main_job_carves_splits_from_the_shared_ape_releases(tmp_path):
    # pharma: one training corpus (de-en.train.*): test its last 500, valid the 500 before.
    pharma = shared_data("ape", "wmt17-de-en-pharma")
    data = demo_data(tmp_path / "pharma", pharma, train_size=3000)
    for field in ("src", "mt", "pe"):
        corpus = lines(pharma / f"de-en.train.{field}")
        assert lines(data / f"test.{field}") == corpus[-500:]
        assert lines(data / f"valid.{field}") == corpus[-1000:-500]
        assert lines(data / f"train.{field}") == corpus[:3000]
    # wiki: a training corpus and a dev set: the dev set is the test set, valid the training corpus's last 500.
    wiki = shared_data("ape", "wmt20-en-de-wiki")
    data = demo_data(tmp_path / "wiki", wiki)
    for field in ("src", "mt", "pe"):
        corpus = lines(wiki / f"train.{field}")
        assert lines(data / f"test.{field}") == lines(wiki / f"dev.{field}")
        assert lines(data / f"valid.{field}") == corpus[-500:]
        assert lines(data / f"train.{field}") == corpus[:-500]


def test_main_job_reads_a_data_dir_as_is_or_cuts_only_its_training_split(tmp_path, ape_raw):
    assert demo_data(tmp_path, ape_raw) == ape_raw
    data = demo_data(tmp_path, ape_raw, train_size=50)
    for split, n in (("train", 50), ("valid", 30), ("test", 20)):
        assert lines(data / f"{split}.pe") == lines(ape_raw / f"{split}.pe")[:n]


def test_main_job_says_what_data_it_needs(tmp_path):
    with pytest.raises(SystemExit, match=r"holds neither \{train,valid,test\}\.\{src,mt,pe\} nor a training corpus"):
        demo_data(tmp_path, tmp_path)
    with pytest.raises(SystemExit, match=r"--held-out 25000: must be at least 1 and below"):
        demo_data(tmp_path, shared_data("ape", "wmt17-de-en-pharma"), held_out=25000)
