"""The input families of the kernel tests and benchmarks (benchmarks/attention_inputs.py)."""

import pytest
import torch

import attention_inputs
from tests.conftest import run_script


def test_structured_inputs_reach_the_block_density_asked_for():
    low = attention_inputs.banded(1, 2, 256, 64, 8.0, noise=0.0)
    high = attention_inputs.banded(1, 2, 256, 64, 8.0, noise=4.0)
    dense = attention_inputs.gaussian(1, 2, 256, 64)
    at = [attention_inputs.block_density(q, k, 1.5, (32, 32))[0] for q, k, _ in (low, high, dense)]
    assert at[0] < at[1] <= at[2] == 1.0, "noise lets scattered keys in; N(0, 1) scores leave no tile empty"
    q, k, v, density, _ = attention_inputs.structured(1, 2, 256, 64, 0.5, tiles=(32, 32))
    assert abs(density - 0.5) < 0.1 and q.shape == k.shape == v.shape == (1, 2, 256, 64)
    assert density == attention_inputs.block_density(q, k, 1.5, (32, 32))[0]
    with pytest.raises(ValueError, match="block density"):
        attention_inputs.structured(1, 1, 64, 64, 0.0)


def test_the_tile_benchmark_counts_visits_per_family():
    proc = run_script("benchmarks/bench_attention_tiles.py", "--lengths", "64", "--tiles", "16", "16", "--heads", "2",
                      "--head-dim", "16", "--densities", "0.4", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| 64 |")]
    assert [(r[1].strip(), r[3].strip()) for r in rows] == [
        ("gaussian", "1.5-entmax"), ("gaussian", "alpha per head"),
        ("structured (0.4 asked)", "1.5-entmax"), ("structured (0.4 asked)", "alpha per head")]
    structured = [float(r[6].strip().rstrip("x")) for r in rows[2:]]
    assert all(0 < ratio < 1 for ratio in structured)
    # With no visit wasted: never more than the kernel makes (fewer would mean a tile with
    # support skipped), and every tile visited once at least.
    least = [float(r[7].strip().rstrip("x")) for r in rows]
    assert all(0 < floor <= ratio for floor, ratio in zip(least[2:], structured)), (least, structured)


def test_the_tile_benchmark_counts_a_sliding_window():
    """--causal --window: N(0, 1) inputs, which leave no tile empty in causal reach, leave the
    tiles outside a window of 16 keys unvisited; --window without --causal is refused."""
    common = ("--lengths", "64", "--tiles", "16", "16", "--heads", "1", "--head-dim", "16", "--families", "gaussian")
    proc = run_script("benchmarks/bench_attention_tiles.py", *common, "--causal", "--window", "16", timeout=600)
    assert proc.returncode == 0 and "within a window of 16 keys" in proc.stdout, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| 64 |")]
    # 7 of the 10 tile pairs in causal reach meet a window of 16 keys (the diagonal and the one before).
    assert [float(r[6].strip().rstrip("x")) for r in rows] == [pytest.approx(0.7, abs=0.02)] * 2
    assert [r[7].strip() for r in rows] == ["-", "-"]  # the window's first pass keeps to fewer tiles
    refused = run_script("benchmarks/bench_attention_tiles.py", *common, "--window", "16", timeout=600)
    assert refused.returncode != 0 and "--window needs --causal" in refused.stderr


def test_the_fit_reads_the_global_keys_and_width_of_structured_attention():
    """attention_inputs.fit on a stand-in capture drawn by banded() with 3 global keys and a
    band of 6 positions: it finds the 3 global keys, and a width whose structured inputs have
    the capture's mean distance between query and key, near the width drawn."""
    q, k, v = attention_inputs.banded(1, 2, 128, 16, 6.0, global_keys=3, noise=0.5, seed=2)
    stand_in = attention_inputs.Capture(q, k, v, torch.tensor([1.5, 1.5]), 16 ** -0.5, "stand-in")
    fitted = attention_inputs.fit([stand_in], tiles=(16, 16))
    assert fitted.global_keys == 3 and 0 < fitted.density < 1
    assert abs(fitted.fitted_distance - fitted.distance) < 0.15 * fitted.distance, fitted
    assert 4.0 < fitted.width < 9.0, fitted


def test_attention_density_counts_the_nonzero_weights_the_masks_leave():
    """Two packed sequences of 3 and 5 positions, causal, 1.5-entmax on q = k = 0 (every
    visible key weighs the same): every pair the masks leave holds weight, 1.0; sparsemax on
    scores that single out one key per query holds one weight per query."""
    q = torch.zeros(1, 1, 8, 4)
    cu = torch.tensor([0, 3, 8])
    flat = attention_inputs.Capture(q, q, q, torch.tensor([1.5]), 1.0, "flat", True, cu)
    assert attention_inputs.attention_density(flat) == 1.0
    one_hot = torch.eye(8)[None, None, :, :4] * 10
    peaked = attention_inputs.Capture(one_hot, one_hot, one_hot, torch.tensor([2.0]), 1.0, "peaked")
    # Queries 0-3 each see one key far above the rest; queries 4-7 (zeros) weigh all 8 alike.
    assert attention_inputs.attention_density(peaked) == (4 * 1 + 4 * 8) / 64
