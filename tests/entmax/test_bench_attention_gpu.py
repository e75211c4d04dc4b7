"""The GPU attention benchmark's step (benchmarks/bench_attention_gpu.py, run on a lent GPU by
benchmarks/gpu_session.sh) on CPU tensors under Triton's interpreter, as the device would run
it: each input family at a tiny size (its times mean nothing here)."""

import re

import torch

from capture_hf import capture
from tests.conftest import run_script, shared_data, sparse_bert

SMALL = ("--device", "cpu", "--batch", "1", "--heads", "2", "--head-dim", "16", "--repeats", "1", "--no-reference",
         "--no-unfused-entmax")
OURS = {"SDPA (fused softmax)", "fused entmax15 (ours)", "fused alpha-entmax per head (ours)"}


def rows(stdout):
    """{variant: time / SDPA} of the benchmark's table."""
    return {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^  (\S.{35}) +([\d.]+)x", stdout, re.M)}


def test_each_input_family_runs_the_gpu_step_on_cpu(tmp_path):
    sparse_bert(tmp_path / "model")
    text = shared_data("text", "hsvae-dbpedia14") / "test.txt"
    torch.save(capture(tmp_path / "model", text, length=32), tmp_path / "captured.pt")
    # Structured inputs whose band and global keys are fitted to the capture, causal.
    proc = run_script("benchmarks/bench_attention_gpu.py", *SMALL, "--lengths", "32", "--inputs", "structured",
                      "--block-density", "0.5", "--causal", "--fit", tmp_path / "captured.pt", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "T=32: structured inputs" in proc.stdout and OURS <= set(rows(proc.stdout)), proc.stdout
    # The capture itself: its two modules as the batch, at its own heads and length.
    proc = run_script("benchmarks/bench_attention_gpu.py", *SMALL, "--inputs", "captured", "--captured",
                      tmp_path / "captured.pt", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "T=32: captured inputs, 2 modules" in proc.stdout and OURS <= set(rows(proc.stdout)), proc.stdout
    torch.save(capture(tmp_path / "model", text, length=256, packed=True), tmp_path / "packed.pt")
    proc = run_script("benchmarks/bench_attention_gpu.py", *SMALL, "--inputs", "captured", "--captured",
                      tmp_path / "packed.pt", timeout=600)
    assert proc.returncode != 0 and "packed sentences" in proc.stderr
