"""Would a histogram of the scores cut the fused forward's Newton passes?  A float64 model.

AdaSplash v2 (deep-spin/adasplash) finds 1.5-entmax's threshold from a histogram: after a
pass for the row maxima, one more pass counts each row's scores in a few bins of the window
where the support lies, z in [0, 1] (counts only, packed into one integer per score
position, so a tile adds no reduction), and the threshold of the binned scores starts the
iteration.  Our forward (``fairseq_sparse/entmax/kernels/forward_pass.py``) starts Newton
instead from the threshold of each row's 8 largest key-tile maxima, found in the maxima's
pass.  Either start is a lower bound of the row's threshold (a subset of the keys, or every
score lowered to its bin's lower edge, only lowers h(tau)), which the kernel's solver needs
(its iterates climb onto the root; for alpha = 2 and 1.5 each pass certifies the exact
threshold once the support it sees is the row's).

Before building a histogram into the kernel, this models the kernel's solver in float64
(one pass over the keys per Newton step, certified steps for alpha = 2 and 1.5, Newton's
tolerance otherwise, a query tile passing until its last row is done, then once more on the
support where a row of alpha = 2 or 1.5 was not certified) and counts these passes per query
tile from four starts on the same scores: the package's (8 tile maxima), the histogram's
lower bound with 8 and with 16 bins over z in [0, 1], and the larger of the package's and
the 8-bin histogram's.  A forward makes them plus the maxima's pass and the output's; a
histogram adds its own unless counted in the maxima's (possible only with bins placed before
the row's maximum is known).  ``--check-kernel`` also counts the package's start with the
kernel itself (under Triton's interpreter on CPU tensors), on the same inputs, as the
model's check.

    python benchmarks/sim_threshold_start.py --lengths 1024 [--sharpness 3] [--causal] [--dtype float32]
    python benchmarks/sim_threshold_start.py --lengths 256 --heads 2 --check-kernel
"""

import argparse
import math
import os

import torch

if not torch.cuda.is_available():  # before the kernels are defined (--check-kernel)
    os.environ.setdefault("TRITON_INTERPRET", "1")

from fairseq_sparse.entmax import kernels  # noqa: E402
from fairseq_sparse.entmax.kernels import config, fixed_kind  # noqa: E402
from fairseq_sparse.entmax.reference import MAX_NEWTON_ITER, newton_tol  # noqa: E402

# Newton's tolerance on the step for a generic alpha, as the kernel takes it (_tolerance):
# float32's for float32 inputs, float16's for half-precision ones.
TOLERANCE = {"float32": newton_tol(torch.float32), "bfloat16": newton_tol(torch.float16)}


def newton_sums(z, tau, k):
    """Per row at tau: (power = sum gap^k, s1 = sum gap^(k - 1), |S|, least gap on S), S = {gap > 0}."""
    gap = (z - tau[:, None]).clamp_min(0)
    on = gap > 0
    power = torch.where(on, gap ** k, 0).sum(1)
    s1 = torch.where(on, gap ** (k - 1), 0).sum(1)
    return power, s1, on.sum(1).double(), torch.where(on, gap, 2.0).min(1).values


def step(z, tau, alpha, fixed):
    """(the step, whether it certifies the exact threshold) at tau, as the kernel's
    ``_newton_step`` and ``_certified_step`` take them: the threshold of S alone where that
    is certified (elsewhere it could overshoot the root), Newton's step otherwise."""
    k = 1 / (alpha - 1)
    power, s1, n_on, least = newton_sums(z, tau, k)
    power = power.clamp_min(1e-300)
    norm = power ** (alpha - 1)
    newton = (norm - 1) / (norm / power * s1).clamp_min(1e-300)
    if not fixed:
        return newton, torch.zeros_like(tau, dtype=torch.bool)
    if alpha == 2:
        return newton, least > newton
    disc = s1 * s1 - n_on * (power - 1)
    d = (power - 1) / (s1 + disc.clamp_min(0).sqrt()).clamp_min(1e-300)
    certified = (disc >= 0) & (least > d)
    return torch.where(certified, d, newton), certified


def subset_threshold(z, alpha, fixed, steps, tol):
    """Threshold of the rows of z (-inf: no score), Newton from 0; a lower bound of any row
    that holds these scores or higher ones.  ``steps`` at most, as the kernel's registers take."""
    tau = torch.zeros(z.shape[0], dtype=z.dtype)
    done = torch.zeros_like(tau, dtype=torch.bool)
    for _ in range(steps):
        d, certified = step(z, tau, alpha, fixed)
        tau = torch.where(done, tau, tau + d)
        done = done | certified | (d.abs() <= tol)
    return tau


def threshold_passes(z, tau, alpha, fixed, tol, block_m):
    """Passes per query tile from tau: Newton's, and the pass on the support where a row was
    not certified (alpha = 2 and 1.5)."""
    done = torch.zeros_like(tau, dtype=torch.bool)
    certified = torch.zeros_like(done)
    passes = torch.zeros_like(tau)
    for _ in range(MAX_NEWTON_ITER):
        if done.all():
            break
        d, now = step(z, tau, alpha, fixed)
        passes += (~done).double()
        tau = torch.where(done, tau, tau + d)
        certified = certified | (now & ~done)
        done = done | now | (d.abs() <= tol)
    support_pass = (fixed & ~certified).view(-1, block_m).any(1)
    return passes.view(-1, block_m).max(1).values + support_pass.double()


def starts(z, alpha, fixed, tol, block_n):
    """Each start's lower bound of every row's threshold."""
    T = z.shape[1]
    pad = (-T) % block_n
    tile_max = torch.nn.functional.pad(z, (0, pad), value=-math.inf).view(z.shape[0], -1, block_n).max(2).values
    kept = tile_max.topk(min(config.KEPT_SLOTS, tile_max.shape[1]), dim=1).values
    margin = config.SUBSET_MARGIN.value  # as the kernel starts: a little below the kept threshold
    package = subset_threshold(kept, alpha, fixed, config.SUBSET_NEWTON_STEPS.value, tol) - margin

    def histogram(bins):  # every score in [0, 1] lowered to its bin's lower edge; below 0 dropped
        edges = torch.where(z >= 0, torch.floor(z * bins) / bins, -math.inf)
        return subset_threshold(edges, alpha, fixed, MAX_NEWTON_ITER, tol) - margin

    hist8 = histogram(8)
    return {"package's start (8 tile maxima)": package, "histogram, 8 bins": hist8,
            "histogram, 16 bins": histogram(16), "larger of package's and 8 bins": torch.maximum(package, hist8)}


def kernel_threshold_passes(q, k, alpha, causal, tiles):
    """The kernel's own passes per query tile for the threshold with the package's solver, on
    inputs in their dtype: its count less the maxima's and the output's passes."""
    heads = alpha if torch.is_tensor(alpha) else torch.full((q.shape[1],), alpha)
    call = kernels.Call(fixed=fixed_kind(alpha), scale=q.shape[-1] ** -0.5, causal=causal,
                        config=kernels.KernelConfig(tiles=(*tiles, 4), diagnostics=True))
    out = kernels.forward(q, k, k, heads.float(), call, alpha_stats=False)
    return out.diagnostics[:, config.DIAG_PASSES, ::tiles[0]] - 2


def model_scores(q, k, causal):
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        T = s.shape[-1]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return s


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024],
                        help="key and query lengths (T = 1,024 takes about a minute on a CPU core)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--sharpness", type=float, default=1.0, help="q ~ N(0, SHARPNESS^2), k ~ N(0, 1)")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="bfloat16",
                        help="the inputs' dtype, whose Newton tolerance a generic alpha takes")
    parser.add_argument("--tiles", type=int, nargs=2, default=[64, 64], metavar=("BLOCK_M", "BLOCK_N"))
    parser.add_argument("--check-kernel", action="store_true",
                        help="also count the package's start's Newton passes with the kernel, on the same inputs")
    args = parser.parse_args()
    block_m, block_n = args.tiles
    print(f"float64 model of the forward's solver; B=1 H={args.heads} head_dim={args.head_dim}, q ~ N(0, "
          f"{args.sharpness:g}^2), k ~ N(0, 1); {'causal' if args.causal else 'not causal'}; tiles {block_m} x "
          f"{block_n}; generic alpha at {args.dtype}'s tolerance. Passes per query tile for the threshold "
          "(Newton's and any on the support; not the maxima's or the output's), mean:")
    for T in args.lengths:
        if T % block_m:
            parser.error(f"--lengths {T}: must be a multiple of BLOCK_M {block_m}")
        gen = torch.Generator().manual_seed(T)
        # The inputs in their dtype (the kernel's); the model takes their values exactly.
        dtype = getattr(torch, args.dtype)
        q = (torch.randn(1, args.heads, T, args.head_dim, generator=gen) * args.sharpness).to(dtype)
        k = torch.randn(1, args.heads, T, args.head_dim, generator=gen).to(dtype)
        s = model_scores(q.double(), k.double(), args.causal)[0]
        for name, alphas in (("sparsemax", [2.0] * args.heads), ("1.5-entmax", [1.5] * args.heads),
                             ("alpha-entmax per head", torch.linspace(1.25, 1.75, args.heads).tolist())):
            fixed = alphas[0] in (1.5, 2.0)
            tol = newton_tol(torch.float32) if fixed else TOLERANCE[args.dtype]
            counts = {}
            for h, alpha in enumerate(alphas):
                row_max = s[h].max(1, keepdim=True).values
                z = (alpha - 1) * (s[h] - row_max) + 1
                for start, tau in starts(z, alpha, fixed, tol, block_n).items():
                    counts.setdefault(start, []).append(threshold_passes(z, tau.clamp_min(0), alpha, fixed, tol,
                                                                         block_m))
            line = "  ".join(f"{start} {torch.cat(c).mean():.2f}" for start, c in counts.items())
            if args.check_kernel:
                alpha = alphas[0] if fixed else torch.tensor(alphas)
                kernel = kernel_threshold_passes(q, k, alpha, args.causal, (block_m, block_n))
                line += f"  | kernel, package's start: {kernel.mean():.2f}"
            print(f"T={T:6d} {name:22s} {line}", flush=True)


if __name__ == "__main__":
    main()
