"""The Triton kernels compile for an H100 (sm_90) with Triton's own compiler and ptxas,
which need no GPU: the interpreter that runs them in CI checks neither types nor what
the GPU compiler accepts (benchmarks/kernel_ptx.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_sparse.entmax import has_triton_kernel
from tests.conftest import run_script

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not has_triton_kernel(), reason="needs Triton")


def test_kernels_compile_for_sm90_without_a_gpu():
    """Every attention kernel at bf16 (the CUDA training path; at head dims 64 and 128 for
    the training benchmark's normalisers; the forward also for keys that fit one tile, and
    with its diagnostics, which add code only when switched on) and the row-wise kernels; the
    half-precision
    generic-alpha kernels take the special-function unit's log, the fixed alphas need none;
    ptxas's report gives each its registers (at most 255 a thread) and spilled bytes."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "kernel_ptx.py"), "--only", "bf16", "rowwise"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line[:58].strip(): [int(n) for n in line[58:].split()] for line in proc.stdout.splitlines()[2:]}
    kernels = {f"attention_{k} {a} bf16" for k in ("forward", "dkdv", "dq")
               for a in ("alpha per head", "1.5-entmax", "sparsemax")}
    kernels |= {f"attention_{k} 1.5-entmax bf16 {mask}" for k in ("forward", "dkdv", "dq")
                for mask in ("window", "packed")}
    kernels |= {f"attention_{k} {a} bf16 D128" for k in ("forward", "dkdv", "dq")
                for a in ("alpha per head", "1.5-entmax")}
    kernels |= {f"attention_forward {a} bf16{d} one tile of 64" for a in ("alpha per head", "1.5-entmax")
                for d in ("", " D128")} | {"attention_forward sparsemax bf16 one tile of 64"}
    kernels |= {"attention_forward alpha per head bf16 diagnostics"}
    kernels |= {"attention_r bf16"} | {f"rowwise_{k} {a} fp32" for k in ("forward", "backward")
                                        for a in ("alpha per row", "1.5-entmax", "sparsemax")}
    assert set(rows) == kernels, proc.stdout
    instructions, ex2, lg2, rcp, sqrt, products, registers, spilled = zip(*rows.values())
    assert all(n > 100 for n in instructions)
    assert all(16 <= n <= 255 for n in registers) and all(n >= 0 for n in spilled)
    lg2 = dict(zip(rows, lg2))
    assert lg2["attention_forward alpha per head bf16"] > 0 and lg2["attention_dq alpha per head bf16"] > 0
    assert lg2["attention_forward 1.5-entmax bf16"] == lg2["attention_forward sparsemax bf16"] == 0
    # The forward's diagnostics are compiled in only where asked for.
    instructions = dict(zip(rows, instructions))
    assert instructions["attention_forward alpha per head bf16 diagnostics"] > \
        instructions["attention_forward alpha per head bf16"]
    products = dict(zip(rows, products))
    assert products["attention_forward alpha per head bf16"] > 0  # tensor-core products
    # Keys that fit one tile: the scores' product is made once, not once per pass.
    for a in ("alpha per head", "1.5-entmax", "sparsemax"):
        assert products[f"attention_forward {a} bf16 one tile of 64"] < products[f"attention_forward {a} bf16"]


def test_tiles_option_names_what_it_takes():
    proc = run_script("benchmarks/kernel_ptx.py", "--tiles", "64,32", timeout=300)
    assert proc.returncode == 2 and "--tiles takes BLOCK_M,BLOCK_N,WARPS" in proc.stderr, proc.stderr[-2000:]
