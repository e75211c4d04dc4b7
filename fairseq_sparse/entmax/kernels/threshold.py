"""The threshold solver's maths for a tile of rows: the gap [z - tau]_+, p and g from it,
Newton's step on h(tau) = ||[z - tau]_+||_k - 1, the certified exact step for alpha = 2
and 1.5, the kept maxima's threshold that Newton starts from, and the cut below which a
key tile holds no support (``forward_pass``'s docstring has the algorithm).
"""

import triton
import triton.language as tl
from triton.language.extra import libdevice

from .config import CUT_MARGIN, SUBSET_NEWTON_STEPS, TINY


@triton.jit
def exp_remainder(w):
    """phi(w) = exp(-w) - 1 + w, by its series w^2 (1/2! - w/3! + ... + w^6/8!) for |w| < 1/2."""
    series = 1.0 / 40320.0
    series = 1.0 / 5040.0 - w * series
    series = 1.0 / 720.0 - w * series
    series = 1.0 / 120.0 - w * series
    series = 1.0 / 24.0 - w * series
    series = 1.0 / 6.0 - w * series
    series = 0.5 - w * series
    return tl.where(tl.abs(w) < 0.5, w * w * series, tl.exp(-w) - 1.0 + w)


@triton.jit
def positive_gap(s, row_max, tau, am1):
    """[z - tau]_+ with z = (alpha - 1)(s - max) + 1, for a tile of scores."""
    return tl.maximum(am1 * (s - row_max[:, None]) + 1.0 - tau[:, None], 0.0)


@triton.jit
def _log(x, PRECISION: tl.constexpr):
    """Natural log of a tile.  Triton lowers tl.log to libdevice's accurate logf, about 30
    instructions a score, most of a generic-alpha pass's work; for half-precision inputs
    ("tf32" products) the special-function unit's approximation (lg2.approx, an absolute
    error near 2^-22 in log2 x) is far below what their p and ds keep.  float32 inputs and
    the interpreter keep the accurate one."""
    if PRECISION == "tf32":
        return libdevice.fast_logf(x)
    else:
        return tl.log(x)


@triton.jit
def prob_and_g(gap, k, FIXED: tl.constexpr, PRECISION: tl.constexpr):
    """(p, g, log p) = (gap^k, p^(2 - alpha) = gap^(k - 1), k log gap), zero off the support:
    one log and one exp per score (g first, then p = g gap).  Newton's sums use the first two."""
    on = gap > 0.0
    log_gap = _log(tl.where(on, gap, 1.0), PRECISION)
    if FIXED == 1:
        p, g = gap, on.to(tl.float32)
    elif FIXED == 2:
        p, g = gap * gap, gap
    else:
        g = tl.where(on, tl.exp((k - 1.0) * log_gap), 0.0)
        p = g * gap
    return p, g, k * log_gap


@triton.jit
def newton_step(power, s1, am1, live):
    """Newton's step on h(tau) = ||gap||_k - 1 from the row sums power = sum gap^k and
    s1 = sum gap^(k - 1); zero for a row without keys."""
    power = tl.maximum(power, TINY)
    norm = tl.exp2(tl.log2(power) * am1)  # ||gap||_k = power^(1/k)
    slope = norm / power * s1  # -h'(tau)
    return tl.where(live, (norm - 1.0) / tl.maximum(slope, TINY), 0.0)


@triton.jit
def certified_step(power, s1, n_on, least_gap, step, FIXED: tl.constexpr):
    """(d, certified) for alpha = 2 and 1.5 at an iterate tau <= tau*, from the sums over
    S = {gap > 0}: power = sum gap^k, s1 = sum gap^(k - 1), n_on = |S| (alpha = 1.5 only)
    and the least gap on S.  tau + d is the threshold of S alone: d = (sum gap - 1) / n
    (alpha = 2: Newton's own step) or the lower root of n d^2 - 2 d sum gap + sum gap^2 - 1
    = 0, (sum gap^2 - 1) / (sum gap + sqrt(disc)) (alpha = 1.5, without cancellation); it is
    tau* when the least gap exceeds d (``forward_pass``'s docstring, 3.)."""
    if FIXED == 1:  # sum gap = power, n = s1 (gap^0 on S)
        return step, least_gap > step
    else:  # sum gap^2 = power, sum gap = s1
        disc = s1 * s1 - n_on * (power - 1.0)
        d = (power - 1.0) / tl.maximum(s1 + tl.sqrt(tl.maximum(disc, 0.0)), TINY)
        return d, (disc >= 0.0) & (least_gap > d)


@triton.jit
def subset_threshold(kept, row_max, live, am1, k, tol, FIXED: tl.constexpr, PRECISION: tl.constexpr):
    """The threshold t of a subset of each row's keys (raw scores in ``kept``, -inf where a
    slot is empty), a lower bound of the row's since dropping keys only lowers h(tau).
    Newton from 0 on the subset, in registers; every iterate is a lower bound too, so a
    fixed number of steps is safe, and a row stops once its step is certified exact
    (alpha = 2 and 1.5, ``certified_step``) or within Newton's tolerance.  The caller
    starts Newton from t, less SUBSET_MARGIN so that float32 rounding cannot land it above
    the root (benchmarks/bench_attention_passes.py counts the passes saved)."""
    z = am1 * (kept - row_max[:, None]) + 1.0
    t = tl.zeros_like(row_max)
    settled = live == 0
    for _ in range(SUBSET_NEWTON_STEPS):
        gap = tl.maximum(z - t[:, None], 0.0)
        gk, gkm1, _ = prob_and_g(gap, k, FIXED, PRECISION)
        power = tl.sum(gk, axis=1)
        s1 = tl.sum(gkm1, axis=1)
        step = newton_step(power, s1, am1, live)
        if FIXED != 0:
            on = gap > 0.0
            n_on = tl.sum(on.to(tl.float32), axis=1) if FIXED == 2 else s1  # (sparsemax: s1 is the count)
            least_gap = tl.min(tl.where(on, gap, 2.0), axis=1)
            d, now = certified_step(power, s1, n_on, least_gap, step, FIXED)
            step = tl.where(now, d, step)
        else:
            now = tl.abs(step) <= tol
        t += tl.where(settled, 0.0, step)
        settled = settled | now
    return t


@triton.jit
def support_cut(row_max, tau, am1, live):
    """Each row's score at or below which a key is off its support at threshold ``tau``
    (am1 (s - max) + 1 <= tau), less a rounding margin (visiting a tile too many is
    harmless, missing one is not); +inf for a row without keys.  Every iterate is a lower
    bound of tau, so the cut only rises: a tile found below it stays below."""
    cut = row_max + (tau - 1.0) / am1
    return tl.where(live, cut - CUT_MARGIN * (1.0 + tl.abs(cut)), float("inf"))


@triton.jit
def may_hold(blocks, tile, cut, kept, kept_tile, least):
    """Whether key tile ``tile`` may hold support for some row of the query tile: its largest
    score (``blocks[tile]``, -inf once it was found to hold none) lies above the lowest cut, and
    some row's bound on the tile, from its kept tile maxima, lies above that row's cut.  A
    row's bound is the tile's own maximum where the tile is among the row's kept tiles,
    else the least kept one (a tile left out never beat it)."""
    may = tl.load(blocks + tile) > tl.min(cut, axis=0)
    if may:
        in_slot = kept_tile == tile
        top = tl.max(tl.where(in_slot, kept, float("-inf")), axis=1)
        bound = tl.where(tl.max(in_slot.to(tl.int32), axis=1) > 0, top, least)
        may = tl.max((bound > cut).to(tl.int32), axis=0) > 0
    return may
