"""The Hugging Face classifier comparison and its benchmark end to end, at toy size (a tiny
random BERT, a few DBpedia-14 sentences of each class)."""

import json
import re

import pytest

from tests.conftest import run_script, shared_data


def test_the_comparison_writes_its_table_and_alpha_figures(tmp_path, tiny_bert):
    data = shared_data("text", "hsvae-dbpedia14")
    out = tmp_path / "hf"
    proc = run_script("hf_sparse_classifier.py", "--out", out, "--data", data, "--bert-model", tiny_bert,
                      "--train-per-class", "2", "--dev-per-class", "1", "--updates", "3", "--eval-every", "2",
                      "--batch-size", "4", "--max-test", "28")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert list(results) == ["softmax", "entmax15", "alpha_near1", "alpha_random"]
    assert results["softmax"]["density"] == [1.0, 1.0]
    # One density per layer; a random 32-wide BERT's scores are too flat for zeros (test_hf checks those).
    assert all(len(results[run]["density"]) == 2 and all(0 < d <= 1 for d in results[run]["density"])
               for run in results)
    assert [e["update"] for e in results["entmax15"]["log"]] == [2, 3]
    for run in ("alpha_near1", "alpha_random"):
        assert (out / f"alphas_{run}.png").stat().st_size > 5000
        assert all(len(layer) == 4 for layer in results[run]["alpha"])  # tiny_bert: 2 layers of 4 heads
    start = [a - c for layer, moved in zip(results["alpha_near1"]["alpha"], results["alpha_near1"]["alpha_change"])
             for a, c in zip(layer, moved)]
    assert start == pytest.approx([1.05] * 8, abs=1e-5), "alpha_near1 starts every head at --near-one"
    table = (out / "results.md").read_text()
    assert re.search(r"^\| softmax \| [0-9.]+ \| [0-9.]+ \| 1\.00 1\.00 \| [0-9.]+ \(1\.00x\) \| - \|", table, re.M)


def test_the_benchmark_runs_and_reports_ratios_to_sdpa(tiny_bert):
    proc = run_script("benchmarks/bench_hf_attention.py", "--model", tiny_bert, "--batch", "2", "--length", "8",
                      "--repeats", "2", "--no-memory")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^\| (\w+) \| \d+ \| ([0-9.]+)x", proc.stdout, re.M)
    assert [name for name, _ in rows] == ["sdpa", "eager", "sparsemax", "entmax15", "alpha_entmax"]
    assert float(rows[0][1]) == 1.0
