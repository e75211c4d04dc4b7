"""benchmarks/simulate_threshold_start.py: the spill bound it relies on holds.  Where the
largest score left out of the kept ones is at most their threshold, that threshold is the
whole row's (against reference.threshold on every key); elsewhere it is a lower bound."""

import math
import sys
from pathlib import Path

import pytest
import torch

from fairseq_sparse.entmax.reference import exact_threshold, newton_tol

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import simulate_threshold_start as sim  # noqa: E402


@pytest.mark.parametrize("alpha", [2.0, 1.5, 1.3])
def test_kept_scores_give_the_row_threshold_when_the_spill_is_below_it(alpha):
    gen = torch.Generator().manual_seed(3)
    spread = torch.logspace(-2, 0.6, 64, dtype=torch.float64)[:, None]  # flat rows to sharp ones
    q = torch.randn(64, 32, generator=gen, dtype=torch.float64) * spread
    s = q @ torch.randn(1000, 32, generator=gen, dtype=torch.float64).T / math.sqrt(32)
    z = (alpha - 1) * (s - s.amax(1, keepdim=True)) + 1
    full = exact_threshold(z, alpha).squeeze(1)
    kept, spill = sim.kept_and_spill(z, 4, 32)
    t = sim.subset_threshold(kept, alpha).squeeze(1)
    certified = spill <= t
    # Some rows certify and some do not at these spreads, so both branches are checked.
    assert 0 < int(certified.sum()) < 64, int(certified.sum())
    torch.testing.assert_close(t[certified], full[certified], atol=1e-9, rtol=0)
    assert bool((t <= full + 1e-9).all())
    # Every score above the spill is kept (the spill is the largest one left out).
    assert bool(((z > spill[:, None]).sum(1) == (kept > spill[:, None]).sum(1)).all())
    assert bool((z == spill[:, None]).any(1)[torch.isfinite(spill)].all())
    # A tile whose every row certifies makes two passes (maxima, output).
    sharp = certified.nonzero().flatten()
    assert sim.tile_passes(z[sharp], alpha, newton_tol(torch.float32), 4, 32) == 2
