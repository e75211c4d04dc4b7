"""scripts/length_study.py: two short runs through fairseq-train, scored at every length, gathered
into results.json, results.md and the figure; a second call redoes nothing, and a results file
made with another model is refused by name."""

import json

import pytest

from fairseq_sparse.sparse_transformer import experiment_length
from tests.conftest import run_script

SMALL = ["--tasks", "reverse", "--variants", "softmax", "alpha_asentmax_paper", "--seeds", "1", "--updates", "3",
         "--validate-every", "2", "--min-length", "3", "--max-length", "5", "--test-factors", "1,2",
         "--test-examples", "5", "--valid-examples", "4", "--stats-examples", "2", "--layers", "1",
         "--embed-dim", "16", "--heads", "2", "--batch-size", "4"]


def run(*args):
    proc = run_script("length_study.py", *args, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return proc


def test_runs_are_scored_gathered_and_not_redone(tmp_path):
    out, results = tmp_path / "runs", tmp_path / "results"
    first = run(*SMALL, "--out", out, "--results", results, "--jobs", "2")
    assert "2 runs to do, 0 done" in first.stdout
    found = json.loads((results / "results.json").read_text())
    assert set(found["runs"]) == {"reverse/nape/softmax/seed1", "reverse/nape/alpha_asentmax_paper/seed1"}
    got = found["runs"]["reverse/nape/alpha_asentmax_paper/seed1"]
    assert set(got["exact_match"]) == {"valid", "test1x", "test2x"}
    assert all(0 <= v <= 100 for v in got["exact_match"].values())
    attention = got["attention"]["test2x"]
    assert attention["seen"] > got["attention"]["test1x"]["seen"] and 0 < attention["kept"] <= attention["seen"]
    assert len(got["learned"]["alpha"]) == 1 and len(got["learned"]["alpha"][0]) == 2  # a layer of two heads
    assert got["best_update"] in (2, 3)
    # The adaptive scale's mean factor on its heads, by length (ASEntmax's start: beta near 0.69).
    assert all(got["attention"][s]["factor"] > 1 for s in ("test1x", "test2x"))
    softmax = found["runs"]["reverse/nape/softmax/seed1"]
    assert "factor" not in softmax["attention"]["test1x"]
    # Softmax keeps every key a query sees.
    assert softmax["attention"]["test2x"]["kept"] == pytest.approx(softmax["attention"]["test2x"]["seen"])
    md = (results / "results.md").read_text()
    assert "## reverse, positions nape" in md and "| softmax | 1 |" in md and "| ASEntmax, learned alpha, paper's start | 1 |" in md
    assert "2x 0, 4x 0" in md  # the paper's softmax on reverse, beside ours
    assert (results / "exact_match.png").stat().st_size > 5000 and (results / "attention.png").stat().st_size > 5000
    assert "![exact match against test length](exact_match.png)" in md
    # Again: nothing to train, the same results.
    again = run(*SMALL, "--out", out, "--results", results)
    assert "0 runs to do, 2 done" in again.stdout
    assert json.loads((results / "results.json").read_text()) == found
    # Another model size must not mix with these runs.
    refused = run_script("length_study.py", *SMALL, "--embed-dim", "32", "--out", out, "--results", results)
    assert refused.returncode != 0 and "--embed-dim 16 there, 32 here" in refused.stderr


def test_an_impossible_configuration_is_refused_by_name():
    with pytest.raises(ValueError, match="--min-length 9 above --max-length 5"):
        experiment_length.LengthStudyConfig(min_length=9, max_length=5)
    with pytest.raises(ValueError, match="--embed-dim 30"):
        experiment_length.LengthStudyConfig(embed_dim=30, heads=4)
