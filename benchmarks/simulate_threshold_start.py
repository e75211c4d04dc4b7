"""Passes over the keys that the fused attention's forward would make with a threshold
found in the maxima's pass: a design study in float64 PyTorch, not the kernel.

The forward kernel (``fairseq_sparse/entmax/attention_kernel.py``) makes one pass for
the row maxima, one per Newton step on the threshold tau, and one for the output; at
T = 1,024 each pass costs about one SDPA forward on an H100 (docs/attention.md).  It
starts Newton from the threshold of each row's 8 largest tile maxima, a lower bound.
This script asks how far a richer maxima pass could go: keep each key tile's R largest
scores (not only its maximum) in K slots per row, and track the *spill*, the largest
score of the row that was not kept (a tile's (R + 1)-th, or one pushed out of the
slots).  The kept scores' own threshold t is a lower bound of tau (dropping keys only
lowers h); when the spill is at most t, every key left out is off the support, so t
*is* tau and the Newton passes are skipped: the forward takes two passes (maxima,
output), the least a two-pass design can.  A row that does not certify so goes on as
the kernel does from t (certified Newton for alpha = 2 and 1.5, float16's tolerance
for per-head alpha as with half-precision inputs).  A query tile (64 rows) makes the
passes of its slowest row.

The cost is not simulated: extracting R scores per tile takes R more row reductions of
the maxima's pass (and an argmin per slot update), where the certified solver's two
extra reductions per Newton pass cost about 0.06 ms a pass on the H100 at T = 1,024
(docs/attention.md).  Whether fewer passes repay that is for a GPU session to time.

    python benchmarks/simulate_threshold_start.py                    # T 512 1024, N(0, 1) and sharper scores
    python benchmarks/simulate_threshold_start.py --lengths 4096 --variants 4,32 4,64 8,64

For sparsemax and 1.5-entmax the package's solver (first column) counts within 0.15
passes per query tile of the kernel's own count under Triton's interpreter at T = 512
(bench_attention_passes.py: 4.88 and 5.16 against 4.94 and 5.31 here); per head that
script's float32 inputs take float32's tolerance, so its counts are higher.
"""

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fairseq_sparse.entmax import attention_kernel  # noqa: E402
from fairseq_sparse.entmax.reference import MAX_NEWTON_ITER, exact_threshold, newton_step, newton_tol  # noqa: E402

TILE = 64  # the kernel's 64 x 64 tiles on a GPU
# The kernel's own start, read from it so that the two cannot drift apart.
TILE_MAXIMA = attention_kernel.NUM_TILE_MAXIMA.value
SUBSET_MARGIN = attention_kernel.SUBSET_MARGIN.value


def subset_threshold(kept, alpha):
    """tau of the kept scores alone (rows of z, -inf where a slot is empty): a lower bound."""
    return exact_threshold(torch.where(torch.isfinite(kept), kept, torch.full_like(kept, -1e9)), alpha)


def kept_and_spill(z, per_tile, slots):
    """Each row's ``slots`` largest among its tiles' ``per_tile`` largest scores, and the
    largest score not kept (-inf if none)."""
    rows, length = z.shape
    tiles = torch.nn.functional.pad(z, (0, (-length) % TILE), value=-math.inf).view(rows, -1, TILE)
    top = tiles.topk(min(per_tile + 1, TILE), dim=2).values
    candidates = top[:, :, :per_tile].reshape(rows, -1)
    spill = top[:, :, per_tile].amax(1) if per_tile < TILE else torch.full((rows,), -math.inf, dtype=z.dtype)
    ranked = candidates.topk(min(slots + 1, candidates.shape[1]), dim=1).values
    if candidates.shape[1] > slots:
        spill = torch.maximum(spill, ranked[:, slots])
    return ranked[:, :slots], spill


def newton_passes(z, tau, alpha, tol, done):
    """Passes of the kernel's Newton loop from ``tau`` (a lower bound per row) until every
    row not ``done`` has certified (alpha = 2, 1.5) or stepped below ``tol``; plus the pass on
    the support where a fixed-alpha row never certified."""
    k = 1.0 / (alpha - 1)
    certified = done.clone()
    passes, step_max = 0, 1.0
    while passes < MAX_NEWTON_ITER and step_max > tol and not bool(certified.all()):
        gap = (z - tau[:, None]).clamp_min(0)
        on = gap > 0
        power, s1, step = (t.squeeze(1) for t in newton_step(gap, k))
        least = torch.where(on, gap, torch.full_like(gap, 2.0)).amin(1)
        if alpha == 2.0:
            certified |= least > step
        elif alpha == 1.5:
            n = on.sum(1).to(z.dtype)
            disc = s1 * s1 - n * (power - 1)
            d = (power - 1) / (s1 + disc.clamp_min(0).sqrt()).clamp_min(1e-300)
            certified |= (disc >= 0) & (least > d)
            step = torch.where(certified, d, step)
        tau = tau + torch.where(done, torch.zeros_like(step), step)
        step_max = torch.where(certified, torch.zeros_like(step), step.abs()).max().item()
        passes += 1
    if alpha in (1.5, 2.0) and not bool(certified.all()):
        passes += 1
    return passes


def tile_passes(z, alpha, tol, per_tile, slots):
    """Passes of one query tile's forward (maxima, Newton, output) with ``per_tile`` scores kept
    per key tile in ``slots`` slots and the spill bound; per_tile = 0 is the package's solver
    (the 8 largest tile maxima, Newton from their threshold less SUBSET_MARGIN, no bound)."""
    if per_tile == 0:
        kept, _ = kept_and_spill(z, 1, TILE_MAXIMA)
        start = (subset_threshold(kept, alpha).squeeze(1) - SUBSET_MARGIN).clamp_min(0)
        done = torch.zeros(z.shape[0], dtype=torch.bool)
    else:
        kept, spill = kept_and_spill(z, per_tile, slots)
        start = subset_threshold(kept, alpha).squeeze(1)
        done = spill <= start
        start = torch.where(done, start, (start - SUBSET_MARGIN).clamp_min(0))
    return 2 + newton_passes(z, start, alpha, tol, done)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--sharpness", type=float, nargs="+", default=[1.0, 3.0],
                        help="q ~ N(0, SHARPNESS^2), k ~ N(0, 1) (trained attention is sharper than 1)")
    parser.add_argument("--variants", nargs="+", default=["2,16", "4,32", "8,64"],
                        help="R,K: scores kept per key tile, slots per row")
    args = parser.parse_args()
    variants = [tuple(int(x) for x in v.split(",")) for v in args.variants]
    print(f"float64 simulation, not causal, {args.heads} heads, head dim {args.head_dim}, 64 x 64 tiles; "
          "mean passes per query tile (the package's solver, then R,K)")
    print(f"{'s':>4s} {'T':>6s}  {'normaliser':22s} {'package':>8s} " + " ".join(f"{v:>8s}" for v in args.variants))
    for sharpness in args.sharpness:
        for length in args.lengths:
            gen = torch.Generator().manual_seed(length)
            q = torch.randn(args.heads, length, args.head_dim, generator=gen, dtype=torch.float64) * sharpness
            k = torch.randn(args.heads, length, args.head_dim, generator=gen, dtype=torch.float64)
            scores = q @ k.transpose(1, 2) / math.sqrt(args.head_dim)
            per_head = torch.linspace(1.25, 1.75, args.heads, dtype=torch.float64).tolist()
            for name, alphas in (("sparsemax", [2.0] * args.heads), ("1.5-entmax", [1.5] * args.heads),
                                 ("alpha-entmax per head", per_head)):
                counts = {v: [] for v in [(0, 0)] + variants}
                for head, alpha in enumerate(alphas):
                    # Float16's tolerance for a generic alpha: what bf16 inputs get (attention_kernel._tolerance).
                    tol = newton_tol(torch.float32 if alpha in (1.5, 2.0) else torch.float16)
                    for start in range(0, length, TILE):
                        s = scores[head, start:start + TILE]
                        z = (alpha - 1) * (s - s.amax(1, keepdim=True)) + 1
                        for per_tile, slots in counts:
                            counts[per_tile, slots].append(tile_passes(z, alpha, tol, per_tile, slots))
                print(f"{sharpness:4g} {length:6d}  {name:22s} "
                      + " ".join(f"{sum(c) / len(c):8.2f}" for c in counts.values()), flush=True)


if __name__ == "__main__":
    main()
