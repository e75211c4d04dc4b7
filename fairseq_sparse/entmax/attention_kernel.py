"""Fused alpha-entmax attention in Triton: the (Tq, Tk) scores are never stored.

For one query row (Peters, Niculae & Martins, 2019; Correia, Niculae & Martins, 2019)

    s_j = scale q.k_j  (-inf where masked),   z_j = (alpha - 1)(s_j - max s) + 1,
    p_j = [z_j - tau]_+^(1 / (alpha - 1)),    sum_j p_j = 1,     o = sum_j p_j v_j.

A program holds BLOCK_M query rows of one (batch, head) and walks the key tiles,
recomputing each tile's scores from q and k on every pass (as FlashAttention does), unless
every key fits one tile (``KernelConfig.one_tile``: short sentences), whose scores it
computes once and keeps in registers:

1. the row maxima, keeping each row's ``KEPT_SLOTS`` largest tile maxima on the way;
2. Newton on h(tau) = ||[z - tau]_+||_k - 1, k = 1 / (alpha - 1), one pass per step:
   h is convex and decreasing, so from any tau with h(tau) >= 0 the iterates climb onto
   the root without overshooting (``reference.threshold``, the same solver row by row,
   starts from tau = 0, where h >= 0 since max z = 1).  The kernel starts from the
   threshold of the kept maxima alone: dropping keys only lowers h, so a subset's
   threshold is a lower bound of the row's, found in registers without a pass, and
   often close (``_subset_threshold``).  Every iterate is a lower bound of tau, so a key tile with no
   support at one iterate has none at the root: the output pass skips a tile whose
   scores all fall at or below tau;
3. for alpha = 2 and 1.5, the exact threshold on the support found
   (``reference.polish_threshold``).  Each Newton pass also finds it from its own sums:
   with S = {z > tau} at an iterate tau <= tau*, the threshold t of S alone
   (sum_S (z - t)^(1/(alpha-1)) = 1) is tau* as soon as every z of S lies above t
   (then S holds the support, and every z outside it is <= tau <= t).  Newton stops
   for a row once that holds, usually two passes before its steps fall below the
   tolerance, and the separate pass on the support runs only for a tile where a row
   never certified its threshold so (rounding at a tie);
4. the output, o = sum p v, and the row statistics the backward pass needs:
   og = sum g v and G = sum g with g = p^(2 - alpha) (so that sum_j g_j dp_j =
   dO.og), P = sum p, and for the alpha gradient mu = sum p log p / P and
   c = log1p(sum (p / P) phi((alpha - 1)(log p - mu))) (in closed form from G, P and mu,
   or by one more pass where that would cancel); see ``reference.alpha_gradient``.

Each score costs at most one exp and one log per pass: the special-function units, not
the matrix products, bound the generic-alpha passes.

What is zero is skipped after the maxima's pass: a key tile is visited only while some row
of the query tile may still have support in it (``_may_hold``: the row's kept maximum of the
tile, or its least kept maximum for a tile left out, above the row's cut at the current
iterate); a tile found without support is marked in ``BLOCKS`` and never visited again, and
the output pass leaves ``BLOCKS`` as the block mask of the pairs that hold support, which
the backward kernels read.  A sliding window (``CAUSAL == WINDOWED``) and packed sequences
(``PACKED``: each position's sequence in ``SEG``, each tile's reach in ``BOUNDS``, from the
host) narrow the key tiles a query tile walks, and the query tiles dk/dv walk for a key
tile, to those within reach; the tiles outside are never visited.  Grouped-query attention
reads key/value head h // (H / H_kv) for query head h, never repeated.  Attention dropout
(``DROPOUT``) drops weights drawn by Philox from a seed and the weight's position (``_kept``)
in the output pass and again in the backward kernels, as FlashAttention does.

The backward pass recomputes p and g from q, k and the stored (max, tau):

    dv_j = sum_i p_ij dO_i,   dp_ij = dO_i.v_j,   ds_ij = g_ij (dp_ij - r_i),
    r_i = dO_i.og_i / G_i,    dq_i = scale sum_j ds_ij k_j,   dk_j = scale sum_i ds_ij q_i,

one kernel over key tiles (dk, dv, summed over the query heads that read the key/value
head) and one over query tiles (dq, and each row's alpha gradient, Correia et al. 2019,
Prop. 1 in ``reference.alpha_gradient``'s stable form), summed per head outside; with
dropout, dp is the dropped weights' upstream gradient and og = sum g v over them.

Scores, thresholds and statistics are float32 whatever the input dtype (a generic
alpha with half-precision inputs stops Newton at float16's tolerance: ``_tolerance``);
products with v and dO take p and ds in the input dtype, as FlashAttention does.  Under
``TRITON_INTERPRET=1`` (set before import) the kernels run on CPU tensors.

How the kernels are laid out on the device (never what they compute: every configuration
gives the same attention, to rounding) is a ``KernelConfig`` argument, ``PACKAGE`` unless a
caller says otherwise.  The solver is the one that won its measurements against a plain
Newton from 0 and against richer starts (docs/notes/fused-attention.md); only it is built.
"""

import dataclasses
from typing import NamedTuple, Optional, Tuple

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from .reference import MAX_NEWTON_ITER, newton_tol
from .triton_kernel import INTERPRET, TINY, exp_remainder

# Row statistics kept between the passes (float32, one row each), and the passes over the
# key tiles the forward kernel made for the row's query tile and the key tiles it computed
# the scores of, over all passes (diagnostics: benchmarks).
STAT_MAX, STAT_TAU, STAT_G, STAT_P, STAT_MU, STAT_C, STAT_PASSES, STAT_TILES = range(8)
NUM_STATS = 8
# Below this, sc (the alpha gradient's statistic) is summed term by term rather than in
# closed form (see _forward_kernel): float32 then keeps dalpha to about 1e-4 of its size.
SC_CLOSED = tl.constexpr(1e-2)
SUBSET_NEWTON_STEPS = tl.constexpr(8)
# CAUSAL's value for a causal mask within a sliding window (0: none, 1: causal).
WINDOWED = 2
# Tile maxima each row keeps from the maxima's pass: Newton's start, and its bounds on the
# tiles that may hold support (``_may_hold``).
KEPT_SLOTS = 8
# Relative margin of the cut below which a key tile is skipped (_cut): far above float32's
# rounding of the scores and thresholds.
CUT_MARGIN = tl.constexpr(2e-6)
SUBSET_MARGIN = tl.constexpr(2e-6)
# Widest head the tiles take (q, the output and og accumulators sit in registers).
MAX_HEAD_DIM = 128
# On CUDA the forward kernel takes up to this many keys in one tile (as wide as the next
# power of two, at least 16, tl.dot's least), so that training batches of sentences read
# q and k once (KernelConfig.one_tile).
ONE_TILE_KEYS = 64


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """How the fused kernels run; the defaults are the package's (``PACKAGE``).

    - ``one_tile``: keys that fit one tile have their scores computed once and kept in
      registers for every pass of the forward kernel (up to ``ONE_TILE_KEYS`` on CUDA).
    - ``tiles``: (BLOCK_M, BLOCK_N, num_warps, num_stages or None) for every kernel,
      whatever the head dim and device, instead of the device's default (and then no
      one-tile widening).
    - ``tolerance``: Newton's tolerance on its step instead of the package's for the
      inputs' dtype (``_tolerance``); a runtime argument of the forward kernel.
    """
    one_tile: bool = True
    tiles: Optional[Tuple[int, int, int, Optional[int]]] = None
    tolerance: Optional[float] = None

    def __post_init__(self):
        if self.tiles is not None:
            if len(self.tiles) == 3:
                object.__setattr__(self, "tiles", (*self.tiles, None))
            block_m, block_n, warps, _ = self.tiles
            if min(block_m, block_n) < 16 or block_m & (block_m - 1) or block_n & (block_n - 1) or warps < 1:
                raise ValueError(f"KernelConfig(tiles={self.tiles}): tiles are powers of two of at least 16 (tl.dot's "
                                 "least), with at least one warp")


PACKAGE = KernelConfig()
# The same, as constexpr globals for the kernels.
NUM_STATS_C = tl.constexpr(NUM_STATS)
WINDOWED_C = tl.constexpr(WINDOWED)
KEPT_SLOTS_C = tl.constexpr(KEPT_SLOTS)
STAT_MAX_C, STAT_TAU_C, STAT_G_C, STAT_P_C, STAT_MU_C, STAT_C_C, STAT_PASSES_C, STAT_TILES_C = (
    tl.constexpr(i) for i in range(NUM_STATS))


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr):
    """a @ b with float32 accumulation.  Triton's interpreter multiplies bfloat16 as raw
    bits, so there the operands (already rounded to their dtype) are widened first."""
    if PRECISION == "interpret":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _scores(q, k_base, skn, skd, kpm_ptr, offs_m, offs_n, offs_d, Tq, Tk, D, scale, window, slope, seg_ptr,
            HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, PRECISION: tl.constexpr):
    """Scaled scores of a (BLOCK_M, BLOCK_N) tile, -inf outside the rows, keys and masks."""
    kt = tl.load(k_base + offs_n[None, :] * skn + offs_d[:, None] * skd,
                 mask=(offs_n[None, :] < Tk) & (offs_d[:, None] < D), other=0.0)
    s = _dot(q, kt, PRECISION) * scale
    return _mask(s, offs_m, offs_n, _keys_ok(kpm_ptr, offs_n, Tk, HAS_KPM), Tq, Tk, window, slope, seg_ptr, CAUSAL,
                 PACKED)


@triton.jit
def _tile(s_one, q, k_base, skn, skd, kpm_ptr, offs_m, offs_n, offs_d, Tq, Tk, D, scale, window, slope, seg_ptr,
          HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, PRECISION: tl.constexpr,
          ONE_TILE: tl.constexpr):
    """A key tile's scores in a forward pass: with ONE_TILE (every key in the first tile) the
    ones the kernel computed once, else recomputed from q and k."""
    if ONE_TILE:
        return s_one
    else:
        return _scores(q, k_base, skn, skd, kpm_ptr, offs_m, offs_n, offs_d, Tq, Tk, D, scale, window,
                       slope, seg_ptr, HAS_KPM, CAUSAL, PACKED, PRECISION)


@triton.jit
def _keys_ok(kpm_ptr, offs_n, Tk, HAS_KPM: tl.constexpr):
    """Which keys of a tile exist and are not padding."""
    ok = offs_n < Tk
    if HAS_KPM:
        ok = ok & (tl.load(kpm_ptr + offs_n, mask=ok, other=1) == 0)
    return ok


@triton.jit
def _mask(s, offs_m, offs_n, keys_ok, Tq, Tk, window, slope, seg_ptr, CAUSAL: tl.constexpr, PACKED: tl.constexpr):
    """-inf outside the rows, the keys and (causal, aligned at the end) the past; with
    CAUSAL == WINDOWED, also the keys ``window`` or more before the query's own; with
    PACKED, the keys of other sequences (``seg_ptr``: each position's sequence, Tq = Tk).
    ``slope``: the head's ALiBi slope, ``-slope |i + Tk - Tq - j|`` added to the scores (0: none,
    which leaves every score as it is, bit for bit)."""
    s = s - slope * tl.abs(offs_m[:, None] + (Tk - Tq) - offs_n[None, :]).to(tl.float32)
    valid = (offs_m[:, None] < Tq) & keys_ok[None, :]
    if PACKED:
        rows = tl.load(seg_ptr + offs_m, mask=offs_m < Tq, other=-1)
        keys = tl.load(seg_ptr + offs_n, mask=offs_n < Tk, other=-2)
        valid = valid & (rows[:, None] == keys[None, :])
    if CAUSAL:
        valid = valid & (offs_n[None, :] <= offs_m[:, None] + (Tk - Tq))
        if CAUSAL == WINDOWED_C:
            valid = valid & (offs_n[None, :] > offs_m[:, None] + (Tk - Tq) - window)
    return tl.where(valid, s, float("-inf"))


@triton.jit
def _gap(s, row_max, tau, am1):
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
def _prob_and_g(gap, k, FIXED: tl.constexpr, PRECISION: tl.constexpr):
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
def _newton_step(power, s1, am1, live):
    """Newton's step on h(tau) = ||gap||_k - 1 from the row sums power = sum gap^k and
    s1 = sum gap^(k - 1); zero for a row without keys."""
    power = tl.maximum(power, TINY)
    norm = tl.exp2(tl.log2(power) * am1)  # ||gap||_k = power^(1/k)
    slope = norm / power * s1  # -h'(tau)
    return tl.where(live, (norm - 1.0) / tl.maximum(slope, TINY), 0.0)


@triton.jit
def _certified_step(power, s1, n_on, least_gap, step, FIXED: tl.constexpr):
    """(d, certified) for alpha = 2 and 1.5 at an iterate tau <= tau*, from the sums over
    S = {gap > 0}: power = sum gap^k, s1 = sum gap^(k - 1), n_on = |S| (alpha = 1.5 only)
    and the least gap on S.  tau + d is the threshold of S alone: d = (sum gap - 1) / n
    (alpha = 2: Newton's own step) or the lower root of n d^2 - 2 d sum gap + sum gap^2 - 1
    = 0, (sum gap^2 - 1) / (sum gap + sqrt(disc)) (alpha = 1.5, without cancellation); it is
    tau* when the least gap exceeds d (docstring, 3.)."""
    if FIXED == 1:  # sum gap = power, n = s1 (gap^0 on S)
        return step, least_gap > step
    else:  # sum gap^2 = power, sum gap = s1
        disc = s1 * s1 - n_on * (power - 1.0)
        d = (power - 1.0) / tl.maximum(s1 + tl.sqrt(tl.maximum(disc, 0.0)), TINY)
        return d, (disc >= 0.0) & (least_gap > d)


@triton.jit
def _subset_threshold(kept, row_max, live, am1, k, tol, FIXED: tl.constexpr, PRECISION: tl.constexpr):
    """The threshold t of a subset of each row's keys (raw scores in ``kept``, -inf where a
    slot is empty), a lower bound of the row's since dropping keys only lowers h(tau).
    Newton from 0 on the subset, in registers; every iterate is a lower bound too, so a
    fixed number of steps is safe, and a row stops once its step is certified exact
    (alpha = 2 and 1.5, ``_certified_step``) or within Newton's tolerance.  The caller
    starts Newton from t, less SUBSET_MARGIN so that float32 rounding cannot land it above
    the root (benchmarks/bench_attention_passes.py counts the passes saved)."""
    z = am1 * (kept - row_max[:, None]) + 1.0
    t = tl.zeros_like(row_max)
    settled = live == 0
    for _ in range(SUBSET_NEWTON_STEPS):
        gap = tl.maximum(z - t[:, None], 0.0)
        gk, gkm1, _ = _prob_and_g(gap, k, FIXED, PRECISION)
        power = tl.sum(gk, axis=1)
        s1 = tl.sum(gkm1, axis=1)
        step = _newton_step(power, s1, am1, live)
        if FIXED != 0:
            on = gap > 0.0
            n_on = tl.sum(on.to(tl.float32), axis=1) if FIXED == 2 else s1  # (sparsemax: s1 is the count)
            least_gap = tl.min(tl.where(on, gap, 2.0), axis=1)
            d, now = _certified_step(power, s1, n_on, least_gap, step, FIXED)
            step = tl.where(now, d, step)
        else:
            now = tl.abs(step) <= tol
        t += tl.where(settled, 0.0, step)
        settled = settled | now
    return t


@triton.jit
def _cut(row_max, tau, am1, live):
    """Each row's score at or below which a key is off its support at threshold ``tau``
    (am1 (s - max) + 1 <= tau), less a rounding margin (visiting a tile too many is
    harmless, missing one is not); +inf for a row without keys.  Every iterate is a lower
    bound of tau, so the cut only rises: a tile found below it stays below."""
    cut = row_max + (tau - 1.0) / am1
    return tl.where(live, cut - CUT_MARGIN * (1.0 + tl.abs(cut)), float("inf"))


@triton.jit
def _may_hold(blocks, tile, cut, kept, kept_tile, least):
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


@triton.jit
def _kept(seed, bh, offs_m, offs_n, Tq, Tk, p_drop, DROPOUT: tl.constexpr):
    """Attention dropout's pattern for a tile: True where weight (i, j) of head bh is kept,
    drawn by Philox from (seed, its position), so that the backward kernels regenerate it
    (as FlashAttention does) instead of storing it; without DROPOUT, True."""
    if DROPOUT:
        offset = (bh.to(tl.int64) * Tq + offs_m[:, None]) * Tk + offs_n[None, :]
        return tl.rand(seed, offset) >= p_drop
    else:
        return True


@triton.jit
def _dropped(x, keep, p_drop, DROPOUT: tl.constexpr):
    """x with the dropped weights zeroed and the kept ones scaled by 1 / (1 - p_drop)."""
    if DROPOUT:
        return tl.where(keep, x / (1.0 - p_drop), 0.0)
    else:
        return x


@triton.jit
def _alpha(ALPHA, h):
    """Head h's alpha, alpha - 1 and 1 / (alpha - 1)."""
    alpha = tl.load(ALPHA + h)
    return alpha, alpha - 1.0, 1.0 / (alpha - 1.0)


@triton.jit
def _head(ALPHA, H, H_KV):
    """This program's (batch x head index, batch, query head, the key/value head it reads:
    grouped-query attention) and its head's alpha, alpha - 1 and 1 / (alpha - 1)."""
    bh = tl.program_id(1)
    h = bh % H
    alpha, am1, k = _alpha(ALPHA, h)
    return bh, bh // H, h, h // (H // H_KV), alpha, am1, k


@triton.jit
def _row_threshold(stats, r_ptr, offs_m, row_ok, Tq):
    """Each row's stored (max, tau) and r = dO.og / G, for the backward kernels."""
    row_max = tl.load(stats + STAT_MAX_C * Tq + offs_m, mask=row_ok, other=0.0)
    tau = tl.load(stats + STAT_TAU_C * Tq + offs_m, mask=row_ok, other=0.0)
    return row_max, tau, tl.load(r_ptr + offs_m, mask=row_ok, other=0.0)


@triton.jit
def _key_end(start_m, Tq, Tk, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """One past the last key any row of this query tile may see."""
    if CAUSAL:
        return tl.minimum(Tk, tl.maximum(start_m + BLOCK_M + (Tk - Tq), 0))
    else:
        return Tk


@triton.jit
def _key_begin(start_m, Tq, Tk, window, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The first key tile's first key that a row of this query tile may see: the tiles wholly
    before every row's window are never visited."""
    if CAUSAL == WINDOWED_C:
        return tl.maximum(start_m + (Tk - Tq) - window + 1, 0) // BLOCK_N * BLOCK_N
    else:
        return 0


@triton.jit
def _key_range(start_m, Tq, Tk, window, bounds, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
               PACKED: tl.constexpr):
    """(first key tile's first key, one past the last key) that a row of this query tile may
    see: with PACKED, within the sequences its rows belong to (``bounds``: their first key and
    one past their last, from the host)."""
    n_begin = _key_begin(start_m, Tq, Tk, window, BLOCK_N, CAUSAL)
    n_end = _key_end(start_m, Tq, Tk, BLOCK_M, CAUSAL)
    if PACKED:
        n_begin = tl.maximum(n_begin, tl.load(bounds) // BLOCK_N * BLOCK_N)
        n_end = tl.minimum(n_end, tl.load(bounds + 1))
    return n_begin, n_end


@triton.jit
def _query_end(start_n, Tq, Tk, window, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """One past the last query that may see a key of the key tile at ``start_n``: later rows'
    windows have all passed it."""
    if CAUSAL == WINDOWED_C:
        return tl.minimum(tl.maximum(start_n + BLOCK_N - 1 + window - (Tk - Tq), 0), Tq)
    else:
        return Tq


@triton.jit
def _forward_kernel(Q, K, V, ALPHA, SLOPES, KPM, O, OG, STATS, BLOCKS, SEG, BOUNDS,
                    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                    sob, soh, som, sod, skpb, H, H_KV, Tq, Tk, D, scale, tol, max_iter, n_tiles, p_drop, seed, window,
                    HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, FIXED: tl.constexpr,
                    DROPOUT: tl.constexpr,
                    ALPHA_STATS: tl.constexpr, WRITE_OG: tl.constexpr, ONE_TILE: tl.constexpr, PRECISION: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    pid_m = tl.program_id(0)
    bh, b, h, kv, alpha, am1, k = _head(ALPHA, H, H_KV)
    slope = tl.load(SLOPES + h)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_nb = tl.arange(0, BLOCK_N)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                mask=(offs_m[:, None] < Tq) & (offs_d[None, :] < D), other=0.0)
    k_base = K + b * skb + kv * skh
    v_base = V + b * svb + kv * svh
    kpm_base = KPM + b * skpb
    seg_base = SEG + b * Tk
    n_begin, n_end = _key_range(start_m, Tq, Tk, window, BOUNDS + (b * tl.num_programs(0) + pid_m) * 2, BLOCK_M,
                                BLOCK_N, CAUSAL, PACKED)
    # Each key tile's largest score, from the maxima's pass; -inf once the tile is known to
    # hold no support for any row of this query tile, which later passes then skip (the
    # output pass leaves -inf exactly where the tile has no support: the backward's block mask).
    blocks = BLOCKS + (bh * tl.num_programs(0) + pid_m) * n_tiles
    visits = 0
    # Keys that all fit one tile (short sentences, as in training): their scores are computed
    # once, here, and every pass below reads them from registers instead of recomputing them
    # from q and k (``_tile``), so q and k are read once.
    s_one = 0.0
    if ONE_TILE:
        s_one = _scores(q, k_base, skn, skd, kpm_base, offs_m, offs_nb, offs_d, Tq, Tk, D, scale, window,
                        slope, seg_base, HAS_KPM, CAUSAL, PACKED, PRECISION)

    # 1. Row maxima, and each row's KEPT_SLOTS largest tile maxima, kept for Newton's start:
    # a tile's maximum replaces the least kept when it beats it.
    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    slots = tl.arange(0, KEPT_SLOTS_C)
    kept = tl.full([BLOCK_M, KEPT_SLOTS_C], float("-inf"), tl.float32)
    kept_tile = tl.full([BLOCK_M, KEPT_SLOTS_C], -1, tl.int32)  # the key tile of each kept maximum
    for start_n in range(n_begin, n_end, BLOCK_N):
        s = _tile(s_one, q, k_base, skn, skd, kpm_base, offs_m, start_n + offs_nb, offs_d, Tq, Tk, D, scale, window,
                  slope, seg_base, HAS_KPM, CAUSAL, PACKED, PRECISION, ONE_TILE)
        best = tl.max(s, axis=1)
        tl.store(blocks + start_n // BLOCK_N, tl.max(best, axis=0))
        visits += 1
        row_max = tl.maximum(row_max, best)
        least, at = tl.min(kept, axis=1, return_indices=True)
        into = (slots[None, :] == at[:, None]) & (best > least)[:, None]
        kept = tl.where(into, best[:, None], kept)
        kept_tile = tl.where(into, start_n // BLOCK_N, kept_tile)
    # A row with no visible key keeps tau = 0 and max 0: all its z are -inf, its p zero.
    live = row_max > float("-inf")
    row_max = tl.where(live, row_max, 0.0)
    least = tl.min(kept, axis=1)  # every key tile left out of a row's slots lies at or below it

    # 2. Newton on h(tau) = ||[z - tau]_+||_k - 1, one pass over the keys per step, from the
    # kept maxima's threshold.  A row is ``certified`` once its threshold is known: a row
    # without keys from the start; for alpha = 2 and 1.5, a row whose Newton pass certifies
    # the exact threshold of its own support (3. in the docstring, ``_certified_step``).
    # Certified rows step no more, and a tile whose rows are all certified makes no Newton pass.
    certified = live == 0
    tau = _subset_threshold(kept, row_max, live, am1, k, tol, FIXED, PRECISION)
    tau = tl.where(certified, tau, tl.maximum(tau - SUBSET_MARGIN, 0.0))
    step_max = tl.max(tl.where(certified, 0.0, 1.0), axis=0)
    it = 0
    passes = 1
    while (it < max_iter) & (step_max > tol):
        power = tl.zeros([BLOCK_M], tl.float32)
        s1 = tl.zeros([BLOCK_M], tl.float32)
        n_on = tl.zeros([BLOCK_M], tl.float32)
        least_gap = tl.full([BLOCK_M], 2.0, tl.float32)
        cut = _cut(row_max, tau, am1, live)
        for start_n in range(n_begin, n_end, BLOCK_N):
            if _may_hold(blocks, start_n // BLOCK_N, cut, kept, kept_tile, least):
                offs_n = start_n + offs_nb
                s = _tile(s_one, q, k_base, skn, skd, kpm_base, offs_m, offs_n, offs_d, Tq, Tk, D, scale, window,
                          slope, seg_base, HAS_KPM, CAUSAL, PACKED, PRECISION, ONE_TILE)
                gap = _gap(s, row_max, tau, am1)
                visits += 1
                if tl.max(tl.max(gap, axis=1), axis=0) > 0.0:
                    gk, gkm1, _ = _prob_and_g(gap, k, FIXED, PRECISION)  # gap^k and gap^(k - 1)
                    power += tl.sum(gk, axis=1)
                    s1 += tl.sum(gkm1, axis=1)
                    if FIXED != 0:
                        on = gap > 0.0
                        if FIXED == 2:
                            n_on += tl.sum(on.to(tl.float32), axis=1)
                        least_gap = tl.minimum(least_gap, tl.min(tl.where(on, gap, 2.0), axis=1))
                else:  # off the support at this iterate, so at the root: no later pass visits it
                    tl.store(blocks + start_n // BLOCK_N, float("-inf"))
        passes += 1
        step = _newton_step(power, s1, am1, live)
        if FIXED != 0:
            d, now = _certified_step(power, s1, n_on, least_gap, step, FIXED)
            certified = certified | now
            step = tl.where(certified, tl.where(live, d, 0.0), step)
        else:
            step = tl.where(certified, 0.0, step)
        tau += step
        step_max = tl.max(tl.where(certified, 0.0, tl.abs(step)), axis=0)
        it += 1

    # 3. Exact threshold on the support found (sparsemax, 1.5-entmax), where a row is
    # left that the Newton passes did not certify.
    if FIXED != 0:
        if tl.min(certified.to(tl.int32), axis=0) == 0:
            n_on = tl.zeros([BLOCK_M], tl.float32)
            z_sum = tl.zeros([BLOCK_M], tl.float32)
            z_sq = tl.zeros([BLOCK_M], tl.float32)
            cut = _cut(row_max, tau, am1, live)
            for start_n in range(n_begin, n_end, BLOCK_N):
                if _may_hold(blocks, start_n // BLOCK_N, cut, kept, kept_tile, least):
                    offs_n = start_n + offs_nb
                    s = _tile(s_one, q, k_base, skn, skd, kpm_base, offs_m, offs_n, offs_d, Tq, Tk, D, scale, window,
                              slope, seg_base, HAS_KPM, CAUSAL, PACKED, PRECISION, ONE_TILE)
                    z = am1 * (s - row_max[:, None]) + 1.0
                    on = z > tau[:, None]
                    # Sums of z - 1 (in (-1, 0] on the support): one pass, and the variance below
                    # does not cancel the way sums of z near 1 would.
                    n_on += tl.sum(on.to(tl.float32), axis=1)
                    z_sum += tl.sum(tl.where(on, z - 1.0, 0.0), axis=1)
                    z_sq += tl.sum(tl.where(on, (z - 1.0) * (z - 1.0), 0.0), axis=1)
                    visits += 1
            passes += 1
            n_on = tl.maximum(n_on, 1.0)
            shifted_mean = z_sum / n_on
            mean = shifted_mean + 1.0
            if FIXED == 1:
                exact = mean - 1.0 / n_on
            else:
                var = tl.maximum(z_sq / n_on - shifted_mean * shifted_mean, 0.0)
                exact = mean - tl.sqrt(tl.maximum(1.0 / n_on - var, 0.0))
            tau = tl.where(live & (certified == 0), exact, tau)

    # 4. Output and statistics.
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    acc_g = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    g_sum = tl.zeros([BLOCK_M], tl.float32)
    p_sum = tl.zeros([BLOCK_M], tl.float32)
    plogp = tl.zeros([BLOCK_M], tl.float32)
    n_on = tl.zeros([BLOCK_M], tl.float32)
    cut = _cut(row_max, tau, am1, live)
    for start_n in range(n_begin, n_end, BLOCK_N):
        support = False
        if _may_hold(blocks, start_n // BLOCK_N, cut, kept, kept_tile, least):
            offs_n = start_n + offs_nb
            s = _tile(s_one, q, k_base, skn, skd, kpm_base, offs_m, offs_n, offs_d, Tq, Tk, D, scale, window,
                      slope, seg_base, HAS_KPM, CAUSAL, PACKED, PRECISION, ONE_TILE)
            gap = _gap(s, row_max, tau, am1)
            visits += 1
            if tl.max(tl.max(gap, axis=1), axis=0) > 0.0:  # a tile without support adds nothing
                support = True
                p, g, log_p = _prob_and_g(gap, k, FIXED, PRECISION)
                v = tl.load(v_base + offs_n[:, None] * svn + offs_d[None, :] * svd,
                            mask=(offs_n[:, None] < Tk) & (offs_d[None, :] < D), other=0.0)
                keep = _kept(seed, bh, offs_m, offs_n, Tq, Tk, p_drop, DROPOUT)
                acc += _dot(_dropped(p, keep, p_drop, DROPOUT).to(v.dtype), v, PRECISION)
                if WRITE_OG:  # og = sum_j g_ij dp_ij / dO_i with the dropped weights' upstream gradient
                    acc_g += _dot(_dropped(g, keep, p_drop, DROPOUT).to(v.dtype), v, PRECISION)
                g_sum += tl.sum(g, axis=1)
                p_sum += tl.sum(p, axis=1)
                if ALPHA_STATS:
                    plogp += tl.sum(tl.where(p > 0.0, p * log_p, 0.0), axis=1)
                    n_on += tl.sum((p > 0.0).to(tl.float32), axis=1)
        if not support:
            tl.store(blocks + start_n // BLOCK_N, float("-inf"))
    passes += 1
    o_ptrs = O + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod
    o_mask = (offs_m[:, None] < Tq) & (offs_d[None, :] < D)
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=o_mask)
    if WRITE_OG:
        tl.store(OG + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod,
                 acc_g.to(OG.dtype.element_ty), mask=o_mask)
    stats = STATS + (bh * NUM_STATS_C) * Tq + offs_m
    row_ok = offs_m < Tq
    tl.store(stats + STAT_MAX_C * Tq, row_max, mask=row_ok)
    tl.store(stats + STAT_TAU_C * Tq, tau, mask=row_ok)
    tl.store(stats + STAT_G_C * Tq, g_sum, mask=row_ok)
    tl.store(stats + STAT_P_C * Tq, p_sum, mask=row_ok)

    if ALPHA_STATS:
        # mu = sum yhat log y and c = log1p(sc), sc = sum yhat phi(delta (log y - mu)), yhat = y / P.
        # Since y^-delta = 1 / gap, sum yhat y^-delta = G / P and sc = exp(delta mu) G / P - 1: no pass
        # over the keys.  That is a difference of nearly equal numbers when sc is small (alpha near 1,
        # flat rows: float32 leaves it an absolute error of a few 1e-6), so a tile with a row below
        # SC_CLOSED sums the series term by term in one more pass (a row whose support is one key
        # has sc = 0 exactly).
        p_safe = tl.maximum(p_sum, TINY)
        mu = plogp / p_safe
        sc = tl.where(n_on > 1.0, tl.maximum(tl.exp(am1 * mu) * (g_sum / p_safe) - 1.0, 0.0), 0.0)
        small = live & (n_on > 1.0) & (sc < SC_CLOSED)
        if tl.max(small.to(tl.int32), axis=0) > 0:
            acc_c = tl.zeros([BLOCK_M], tl.float32)
            for start_n in range(n_begin, n_end, BLOCK_N):
                if tl.load(blocks + start_n // BLOCK_N) > float("-inf"):  # the tiles that hold support
                    offs_n = start_n + offs_nb
                    s = _tile(s_one, q, k_base, skn, skd, kpm_base, offs_m, offs_n, offs_d, Tq, Tk, D, scale, window,
                              slope, seg_base, HAS_KPM, CAUSAL, PACKED, PRECISION, ONE_TILE)
                    gap = _gap(s, row_max, tau, am1)
                    p, g, log_p = _prob_and_g(gap, k, FIXED, PRECISION)
                    u = log_p - mu[:, None]
                    acc_c += tl.sum(tl.where(p > 0.0, p * exp_remainder(am1 * u), 0.0), axis=1)
                    visits += 1
            sc = acc_c / p_safe
            passes += 1
        # log1p(sc): its series where 1 + sc would round (sc >= 0).
        c = tl.where(sc < 1e-3, sc * (1.0 - sc * (0.5 - sc * (1.0 / 3.0 - sc * 0.25))), tl.log(1.0 + sc))
        tl.store(stats + STAT_MU_C * Tq, mu, mask=row_ok)
        tl.store(stats + STAT_C_C * Tq, c, mask=row_ok)
    tl.store(stats + STAT_PASSES_C * Tq, tl.zeros([BLOCK_M], tl.float32) + passes, mask=row_ok)
    tl.store(stats + STAT_TILES_C * Tq, tl.zeros([BLOCK_M], tl.float32) + visits, mask=row_ok)


@triton.jit
def _dkdv_kernel(Q, K, V, DO, ALPHA, SLOPES, KPM, STATS, R, DK, DV, BLOCKS, SEG, BOUNDS,
                 sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                 sdb, sdh, sdm, sdd, skpb, H, H_KV, Tq, Tk, D, scale, n_m_tiles, n_tiles, p_drop, seed, window,
                 HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, FIXED: tl.constexpr,
                 USE_BLOCKS: tl.constexpr,
                 DROPOUT: tl.constexpr,
                 PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """dk and dv of one key tile of one key/value head, summed over the query heads that
    read it (all H of them, or its group under grouped-query attention)."""
    pid_n = tl.program_id(0)
    b = tl.program_id(1) // H_KV
    kv = tl.program_id(1) % H_KV
    groups = H // H_KV
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_mb = tl.arange(0, BLOCK_M)
    kv_mask = (offs_n[:, None] < Tk) & (offs_d[None, :] < D)
    k_tile = tl.load(K + b * skb + kv * skh + offs_n[:, None] * skn + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
    v_tile = tl.load(V + b * svb + kv * svh + offs_n[:, None] * svn + offs_d[None, :] * svd, mask=kv_mask, other=0.0)
    kt = tl.trans(k_tile)
    vt = tl.trans(v_tile)
    keys_ok = _keys_ok(KPM + b * skpb, offs_n, Tk, HAS_KPM)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    m_begin = 0
    if CAUSAL:  # rows before this one see none of these keys
        m_begin = tl.maximum(start_n - (Tk - Tq), 0) // BLOCK_M * BLOCK_M
    m_end = _query_end(start_n, Tq, Tk, window, BLOCK_N, CAUSAL)
    seg_base = SEG + b * Tk
    if PACKED:  # only the rows of the sequences this key tile belongs to
        bounds = BOUNDS + (b * tl.num_programs(0) + pid_n) * 2
        m_begin = tl.maximum(m_begin, tl.load(bounds) // BLOCK_M * BLOCK_M)
        m_end = tl.minimum(m_end, tl.load(bounds + 1))
    for member in range(0, groups):
        h = kv * groups + member
        bh = b * H + h
        alpha, am1, k = _alpha(ALPHA, h)
        slope = tl.load(SLOPES + h)
        stats = STATS + (bh * NUM_STATS_C) * Tq
        for start_m in range(m_begin, m_end, BLOCK_M):
            # The forward's block mask: a (query tile, key tile) pair without support adds nothing.
            held = True
            if USE_BLOCKS:
                held = tl.load(BLOCKS + (bh * n_m_tiles + start_m // BLOCK_M) * n_tiles + pid_n) > float("-inf")
            if held:
                offs_m = start_m + offs_mb
                row_ok = offs_m < Tq
                qd_mask = row_ok[:, None] & (offs_d[None, :] < D)
                q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd, mask=qd_mask,
                            other=0.0)
                do = tl.load(DO + b * sdb + h * sdh + offs_m[:, None] * sdm + offs_d[None, :] * sdd, mask=qd_mask,
                             other=0.0)
                row_max, tau, r = _row_threshold(stats, R + bh * Tq, offs_m, row_ok, Tq)
                s = _mask(_dot(q, kt, PRECISION) * scale, offs_m, offs_n, keys_ok, Tq, Tk, window, slope, seg_base,
                          CAUSAL, PACKED)
                gap = _gap(s, row_max, tau, am1)
                if tl.max(tl.max(gap, axis=1), axis=0) > 0.0:
                    p, g, _ = _prob_and_g(gap, k, FIXED, PRECISION)
                    keep = _kept(seed, bh, offs_m, offs_n, Tq, Tk, p_drop, DROPOUT)
                    dv += _dot(tl.trans(_dropped(p, keep, p_drop, DROPOUT).to(do.dtype)), do, PRECISION)
                    dp = _dropped(_dot(do, vt, PRECISION), keep, p_drop, DROPOUT)  # d loss / d p
                    ds = g * (dp - r[:, None])
                    dk += _dot(tl.trans(ds.to(q.dtype)), q, PRECISION)
    tl.store(DK + b * skb + kv * skh + offs_n[:, None] * skn + offs_d[None, :] * skd,
             (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + b * svb + kv * svh + offs_n[:, None] * svn + offs_d[None, :] * svd,
             dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_kernel(Q, K, V, DO, ALPHA, SLOPES, KPM, STATS, R, DQ, DALPHA, BLOCKS, SEG, BOUNDS,
               sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
               sdb, sdh, sdm, sdd, skpb, H, H_KV, Tq, Tk, D, scale, n_tiles, p_drop, seed, window,
               HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, FIXED: tl.constexpr,
               ALPHA_GRAD: tl.constexpr,
               USE_BLOCKS: tl.constexpr, DROPOUT: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    pid_m = tl.program_id(0)
    bh, b, h, kv, alpha, am1, k = _head(ALPHA, H, H_KV)
    slope = tl.load(SLOPES + h)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_nb = tl.arange(0, BLOCK_N)
    row_ok = offs_m < Tq
    qd_mask = row_ok[:, None] & (offs_d[None, :] < D)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd, mask=qd_mask, other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + offs_m[:, None] * sdm + offs_d[None, :] * sdd, mask=qd_mask, other=0.0)
    k_base = K + b * skb + kv * skh
    v_base = V + b * svb + kv * svh
    kpm_base = KPM + b * skpb
    stats = STATS + (bh * NUM_STATS_C) * Tq
    row_max, tau, r = _row_threshold(stats, R + bh * Tq, offs_m, row_ok, Tq)
    if ALPHA_GRAD:
        p_safe = tl.maximum(tl.load(stats + STAT_P_C * Tq + offs_m, mask=row_ok, other=1.0), TINY)
        mu = tl.load(stats + STAT_MU_C * Tq + offs_m, mask=row_ok, other=0.0)
        c = tl.load(stats + STAT_C_C * Tq + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    dalpha = tl.zeros([BLOCK_M], tl.float32)
    seg_base = SEG + b * Tk
    n_begin, n_end = _key_range(start_m, Tq, Tk, window, BOUNDS + (b * tl.num_programs(0) + pid_m) * 2, BLOCK_M,
                                BLOCK_N, CAUSAL, PACKED)
    blocks = BLOCKS + (bh * tl.num_programs(0) + pid_m) * n_tiles
    for start_n in range(n_begin, n_end, BLOCK_N):
        held = True
        if USE_BLOCKS:  # the forward's block mask: a key tile without support adds nothing
            held = tl.load(blocks + start_n // BLOCK_N) > float("-inf")
        if held:
            offs_n = start_n + offs_nb
            s = _scores(q, k_base, skn, skd, kpm_base, offs_m, offs_n, offs_d, Tq, Tk, D, scale, window,
                        slope, seg_base, HAS_KPM, CAUSAL, PACKED, PRECISION)
            gap = _gap(s, row_max, tau, am1)
            if tl.max(tl.max(gap, axis=1), axis=0) > 0.0:
                p, g, log_p = _prob_and_g(gap, k, FIXED, PRECISION)
                kv_mask = (offs_n[:, None] < Tk) & (offs_d[None, :] < D)
                vt = tl.load(v_base + offs_n[None, :] * svn + offs_d[:, None] * svd,
                             mask=(offs_n[None, :] < Tk) & (offs_d[:, None] < D), other=0.0)
                k_tile = tl.load(k_base + offs_n[:, None] * skn + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
                keep = _kept(seed, bh, offs_m, offs_n, Tq, Tk, p_drop, DROPOUT)
                dp = _dropped(_dot(do, vt, PRECISION), keep, p_drop, DROPOUT)  # d loss / d p
                ds = g * (dp - r[:, None])
                dq += _dot(ds.to(k_tile.dtype), k_tile, PRECISION)
                if ALPHA_GRAD:
                    # reference.alpha_gradient, term by term.
                    on = p > 0.0
                    u = log_p - mu[:, None]
                    w = am1 * u + c[:, None]
                    phi_w = exp_remainder(w)
                    terms = (c[:, None] - phi_w) / (am1 * am1) + mu[:, None] * (phi_w - w) / am1
                    dalpha += tl.sum(tl.where(on, dp * (p / p_safe[:, None]) * terms, 0.0), axis=1)
    tl.store(DQ + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
             (dq * scale).to(DQ.dtype.element_ty), mask=qd_mask)
    if ALPHA_GRAD:
        tl.store(DALPHA + bh * Tq + offs_m, dalpha, mask=row_ok)


@triton.jit
def _r_kernel(DO, OG, STATS, R, sdb, sdh, sdm, sdd, sob, soh, som, sod, rows, H, Tq, D,
              BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    """r = dO.og / G per row, in float32 without widened copies of dO and og (which
    would double the backward pass's peak memory); dO and og in their own layouts."""
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_r[:, None] < rows) & (offs_d[None, :] < D)
    bh = offs_r // Tq
    b, h, t = bh // H, bh % H, offs_r % Tq
    do = tl.load(DO + (b * sdb + h * sdh + t * sdm)[:, None] + offs_d[None, :] * sdd, mask=mask,
                 other=0.0).to(tl.float32)
    og = tl.load(OG + (b * sob + h * soh + t * som)[:, None] + offs_d[None, :] * sod, mask=mask,
                 other=0.0).to(tl.float32)
    g_sum = tl.load(STATS + (bh * NUM_STATS_C + STAT_G_C) * Tq + t, mask=offs_r < rows, other=1.0)
    tl.store(R + offs_r, tl.sum(do * og, axis=1) / tl.maximum(g_sum, TINY), mask=offs_r < rows)


def supports(q):
    """Tensors these kernels take: on CUDA, or on CPU under Triton's interpreter."""
    return (q.is_cuda or (INTERPRET and q.device.type == "cpu")) \
        and q.dtype in (torch.float32, torch.float16, torch.bfloat16)


def _blocks(d, device_type, config=PACKAGE):
    """(BLOCK_M, BLOCK_N, BLOCK_D, launch options)."""
    block_d = max(16, triton.next_power_of_2(d))
    if config.tiles is not None:
        block_m, block_n, warps, stages = config.tiles
        return block_m, block_n, block_d, dict(num_warps=warps, **({} if stages is None else dict(num_stages=stages)))
    if device_type == "cpu":  # the interpreter: small tiles keep the numpy work small
        return 16, 16, block_d, dict(num_warps=1)
    if block_d <= 64:
        return 64, 64, block_d, dict(num_warps=4)
    return 64, 32, block_d, dict(num_warps=4)


def _forward_blocks(d, keys, device_type, config=PACKAGE):
    """(BLOCK_M, BLOCK_N, BLOCK_D, launch options, one tile) of the forward kernel for
    ``keys`` keys: on CUDA, unless ``config.tiles`` is set, up to ONE_TILE_KEYS keys fit one
    tile of the next power of two; the interpreter keeps its small tiles."""
    block_m, block_n, block_d, launch = _blocks(d, device_type, config)
    if config.one_tile and device_type == "cuda" and config.tiles is None and keys <= ONE_TILE_KEYS:
        block_n = max(16, triton.next_power_of_2(keys))
    return block_m, block_n, block_d, launch, config.one_tile and keys <= block_n


def _precision(q):
    if q.device.type == "cpu":
        return "interpret"
    # float32 inputs get float32 products (tensor cores would round them to tf32).
    return "ieee" if q.dtype == torch.float32 else "tf32"


def _tolerance(q, fixed, config=PACKAGE):
    """Newton's tolerance on its step, float32's unless a generic alpha meets half-precision
    inputs: there it is float16's (5.5e-3, so the threshold is left within about 3e-5),
    which saves Newton passes while the outputs stay within their own rounding and the
    alpha gradient moves by under 1e-4 of itself (bfloat16's own tolerance would move dq
    visibly; docs/notes/fused-attention.md has the measurements).  The fixed alphas keep float32's:
    their closed-form threshold needs the support exact."""
    if config.tolerance is not None:
        return config.tolerance
    half = q.dtype in (torch.float16, torch.bfloat16) and fixed == 0
    return newton_tol(torch.float16 if half else torch.float32)


def dense(t):
    """``t`` itself where its elements fill their storage without gaps or overlaps in some order
    of its dimensions (a permuted contiguous tensor, such as fairseq's (T, B, H, D) projections
    viewed as (B, H, T, D)), else a contiguous copy.  The kernels take any strides, and a tensor
    made ``empty_like`` a dense one has its very strides, so outputs and gradients share their
    input's strides and the attention's inputs, output and gradients need no copies."""
    expected = 1
    for stride, size in sorted((st, n) for st, n in zip(t.stride(), t.shape) if n > 1):
        if stride != expected:
            return t.contiguous()
        expected *= size
    return t


def _padding_arg(key_padding_mask, q):
    """The mask (B, Tk) int8, or a placeholder the kernels never read (HAS_KPM false)."""
    return key_padding_mask if key_padding_mask is not None else q.new_zeros((q.shape[0], 1), dtype=torch.int8)


def forward(q, k, v, alpha_heads, fixed, causal, key_padding_mask, scale, alpha_stats, backward=True,
            config=PACKAGE, dropout=0.0, seed=0, window=None, packed=None, slopes=None):
    """(o, og, stats, blocks) for q (B, H, Tq, D), k and v (B, H_kv, Tk, D) (H_kv dividing H:
    query head h reads key/value head h // (H / H_kv), grouped-query attention, without the
    key/value heads repeated in memory); ``alpha_heads`` float32 (H,).  Without ``backward``
    (inference) og is not computed (None).  ``blocks``
    (B * H, query tiles, key tiles), float32, is -inf where a (query tile, key tile) pair
    holds no support (or lies past the causal diagonal), else the tile's largest score: the
    backward kernels visit only the pairs that hold support (4 bytes a pair: 1 / 1,024 of the
    scores' size at 64 x 64 tiles).  ``dropout``: attention dropout's probability, its
    pattern drawn from ``seed`` (:func:`kept_weights`), which the backward must be given too.
    ``window`` (with ``causal``): query i sees only the ``window`` keys up to its own, i + Tk - Tq
    (a sliding window); the key tiles before a query tile's windows are never visited.
    ``packed`` (a :class:`Packing`; B = 1, Tq = Tk): packed sequences; a query sees only its
    own sequence's keys, and the key tiles outside its sequences are never visited.
    ``slopes`` float32 (H,): ALiBi, ``-slopes[h] |i + Tk - Tq - j|`` added to head h's scores
    (None: no bias)."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    o = torch.empty_like(q)
    og = torch.empty_like(q) if backward else None
    stats = torch.zeros((B * H, NUM_STATS, Tq), dtype=torch.float32, device=q.device)
    block_m, block_n, block_d, launch, single = _forward_blocks(D, Tk, q.device.type, config)
    kpm = _padding_arg(key_padding_mask, q)
    grid = (triton.cdiv(Tq, block_m), B * H)
    n_tiles = triton.cdiv(Tk, block_n)
    blocks = torch.full((B * H, grid[0], n_tiles), float("-inf"), dtype=torch.float32, device=q.device)
    seg, bounds = _packing_args(packed, block_m, q)
    _forward_kernel[grid](
        q, k, v, alpha_heads, _slopes_arg(slopes, alpha_heads), kpm, o, og if backward else o, stats, blocks, seg,
        bounds, *q.stride(), *k.stride(),
        *v.stride(),
        *o.stride(), kpm.stride(0), H, k.shape[1], Tq, Tk, D, scale, _tolerance(q, fixed, config), MAX_NEWTON_ITER,
        n_tiles, float(dropout), int(seed), int(window or 0), DROPOUT=dropout > 0,
        HAS_KPM=key_padding_mask is not None, CAUSAL=_causal(causal, window), PACKED=packed is not None, FIXED=fixed,
        ALPHA_STATS=alpha_stats, WRITE_OG=backward,
        ONE_TILE=single, PRECISION=_precision(q), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, **launch)
    return o, og, stats, blocks


class Packing(NamedTuple):
    """Packed sequences as the kernels read them, made once a call by :func:`packing`: each
    position's sequence (1, T) int32, and that sequence's first position and one past its last."""
    seg: torch.Tensor
    first: torch.Tensor
    end: torch.Tensor


def packing(cu_seqlens, ids):
    """The :class:`Packing` of sequences ``cu_seqlens`` (S + 1,) whose positions' ids (1, T) are
    ``ids`` (``fused_attention.sequence_ids``, which checks them)."""
    cu = cu_seqlens.to(ids.device, torch.long)
    return Packing(ids.to(torch.int32).contiguous(), cu[ids], cu[ids + 1])


def _packing_args(packed, block, q):
    """(SEG, BOUNDS) for the kernels: the positions' sequences, and for each tile of ``block``
    positions the first position of its first position's sequence and one past the last of
    its last one's, (1, tiles, 2) int32; without packing, q in their stead (never read)."""
    if packed is None:
        return q, q
    T = packed.seg.shape[1]
    starts = torch.arange(0, T, block, device=q.device)
    ends = (starts + block).clamp(max=T) - 1
    return packed.seg, torch.stack([packed.first[:, starts], packed.end[:, ends]], -1).to(torch.int32).contiguous()


def _slopes_arg(slopes, alpha_heads):
    """The ALiBi slopes (H,) float32 as the kernels read them: zeros (no bias) for None."""
    if slopes is None:
        return torch.zeros_like(alpha_heads)
    return slopes.to(alpha_heads.device, torch.float32).contiguous()


def _causal(causal, window):
    """The kernels' CAUSAL: 0, 1 (causal) or WINDOWED (causal within a sliding window; the
    callers check that ``window`` comes with ``causal``, ``fused_attention.check_window``)."""
    return WINDOWED if window is not None else int(bool(causal))


def backward(q, k, v, do, og, stats, blocks, alpha_heads, fixed, causal, key_padding_mask, scale, alpha_grad,
             config=PACKAGE, dropout=0.0, seed=0, window=None, packed=None, slopes=None):
    """(dq, dk, dv, dalpha of each row (B*H, Tq) or None); ``blocks`` is the forward's.  Its
    block mask is used where the backward's tiles are the forward's (they differ only where
    the forward took every key in one wider tile)."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    # r_i = sum_j g_ij dp_ij / sum_j g_ij = dO_i . og_i / G_i (zero for a row without keys).
    rows = B * H * Tq
    r = torch.empty((B, H, Tq), dtype=torch.float32, device=q.device)
    block_m, block_n, block_d, launch = _blocks(D, q.device.type, config)
    block_r = 16 if q.device.type == "cpu" else 64
    if rows:
        _r_kernel[(triton.cdiv(rows, block_r),)](do, og, stats, r, *do.stride(), *og.stride(), rows, H, Tq, D,
                                                 BLOCK_R=block_r, BLOCK_D=block_d)
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    dalpha = torch.empty((B * H, Tq), dtype=torch.float32, device=q.device) if alpha_grad else r
    kpm = _padding_arg(key_padding_mask, q)
    n_m_tiles, n_tiles = triton.cdiv(Tq, block_m), triton.cdiv(Tk, block_n)
    # Tiles of two powers of two give the same counts only when one tile holds every key.
    use_blocks = tuple(blocks.shape[1:]) == (n_m_tiles, n_tiles)
    common = dict(HAS_KPM=key_padding_mask is not None, CAUSAL=_causal(causal, window), PACKED=packed is not None,
                  FIXED=fixed, USE_BLOCKS=use_blocks,
                  DROPOUT=dropout > 0, PRECISION=_precision(q), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
                  **launch)
    # q, k and v are dense (``dense``), so dq, dk and dv, made like them, share their strides;
    # dO is read in whatever layout autograd gives it.
    kv_heads = k.shape[1]
    seg, key_bounds = _packing_args(packed, block_n, q)
    slopes = _slopes_arg(slopes, alpha_heads)
    _dkdv_kernel[(n_tiles, B * kv_heads)](
        q, k, v, do, alpha_heads, slopes, kpm, stats, r, dk, dv, blocks, seg, key_bounds, *q.stride(), *k.stride(),
        *v.stride(),
        *do.stride(), kpm.stride(0), H, kv_heads, Tq, Tk, D, scale, n_m_tiles, n_tiles, float(dropout), int(seed),
        int(window or 0), **common)
    _dq_kernel[(n_m_tiles, B * H)](
        q, k, v, do, alpha_heads, slopes, kpm, stats, r, dq, dalpha, blocks, seg, _packing_args(packed, block_m, q)[1],
        *q.stride(), *k.stride(), *v.stride(),
        *do.stride(), kpm.stride(0), H, kv_heads, Tq, Tk, D, scale, n_tiles, float(dropout), int(seed),
        int(window or 0), ALPHA_GRAD=alpha_grad, **common)
    return dq, dk, dv, (dalpha if alpha_grad else None)


@triton.jit
def _kept_kernel(OUT, seed, p_drop, Tq, Tk, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(2)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = (offs_m[:, None] < Tq) & (offs_n[None, :] < Tk)
    kept = _kept(seed, bh, offs_m, offs_n, Tq, Tk, p_drop, True)
    tl.store(OUT + (bh.to(tl.int64) * Tq + offs_m[:, None]) * Tk + offs_n[None, :], kept.to(tl.int8), mask=inside)


def kept_weights(seed, batch_heads, Tq, Tk, dropout, device):
    """(B * H, Tq, Tk) bool: the weights attention dropout keeps in the kernels' calls with
    ``seed`` and ``dropout`` (the same Philox draws), for tests and analysis."""
    out = torch.empty((batch_heads, Tq, Tk), dtype=torch.int8, device=device)
    _kept_kernel[(triton.cdiv(Tq, 16), triton.cdiv(Tk, 16), batch_heads)](out, int(seed), float(dropout), Tq, Tk,
                                                                          BLOCK_M=16, BLOCK_N=16)
    return out.bool()
