"""The fused attention's forward pass: the (Tq, Tk) scores are never stored.

For one query row (Peters, Niculae & Martins, 2019; Correia, Niculae & Martins, 2019)

    s_j = scale q.k_j  (-inf where masked),   z_j = (alpha - 1)(s_j - max s) + 1,
    p_j = [z_j - tau]_+^(1 / (alpha - 1)),    sum_j p_j = 1,     o = sum_j p_j v_j.

A program holds BLOCK_M query rows of one (batch, head) and walks the key tiles,
recomputing each tile's scores from q and k on every pass (as FlashAttention does), unless
every key fits one tile (``KernelConfig.one_tile``: short sentences), whose scores it
computes once and keeps in registers.  Each phase is a function of its own:

1. the row maxima (``_maxima``), keeping each row's ``KEPT_SLOTS`` largest tile maxima on the way;
2. Newton on h(tau) = ||[z - tau]_+||_k - 1, k = 1 / (alpha - 1), one pass per step (``_newton``):
   h is convex and decreasing, so from any tau with h(tau) >= 0 the iterates climb onto
   the root without overshooting (``reference.threshold``, the same solver row by row,
   starts from tau = 0, where h >= 0 since max z = 1).  The kernel starts from the
   threshold of the kept maxima alone: dropping keys only lowers h, so a subset's
   threshold is a lower bound of the row's, found in registers without a pass, and
   often close (``threshold.subset_threshold``).  Every iterate is a lower bound of tau, so a key tile with no
   support at one iterate has none at the root: the output pass skips a tile whose
   scores all fall at or below tau;
3. for alpha = 2 and 1.5, the exact threshold on the support found
   (``_polish``, as ``reference.polish_threshold``).  Each Newton pass also finds it from its own sums:
   with S = {z > tau} at an iterate tau <= tau*, the threshold t of S alone
   (sum_S (z - t)^(1/(alpha-1)) = 1) is tau* as soon as every z of S lies above t
   (then S holds the support, and every z outside it is <= tau <= t).  Newton stops
   for a row once that holds, usually two passes before its steps fall below the
   tolerance, and the separate pass on the support runs only for a tile where a row
   never certified its threshold so (rounding at a tie);
4. the output (``_output``), o = sum p v, and the row statistics the backward pass needs:
   og = sum g v and G = sum g with g = p^(2 - alpha) (so that sum_j g_j dp_j =
   dO.og), P = sum p, and for the alpha gradient mu = sum p log p / P and
   c = log1p(sum (p / P) phi((alpha - 1)(log p - mu))) (in closed form from G, P and mu,
   or by one more pass where that would cancel: ``_alpha_statistics``); see
   ``reference.alpha_gradient``.

Each score costs at most one exp and one log per pass: the special-function units, not
the matrix products, bound the generic-alpha passes.

What is zero is skipped after the maxima's pass: a key tile is visited only while some row
of the query tile may still have support in it (``threshold.may_hold``: the row's kept maximum of the
tile, or its least kept maximum for a tile left out, above the row's cut at the current
iterate); a tile found without support is marked in ``BLOCKS`` and never visited again, and
the output pass leaves ``BLOCKS`` as the block mask of the pairs that hold support, which
the backward kernels read.  A sliding window (``CAUSAL == WINDOWED``) and packed sequences
(``PACKED``: each position's sequence in ``SEG``, each tile's reach in ``BOUNDS``, from the
host) narrow the key tiles a query tile walks, and the query tiles dk/dv walk for a key
tile, to those within reach; the tiles outside are never visited.  Grouped-query attention
reads key/value head h // (H / H_kv) for query head h, never repeated.  Attention dropout
(``DROPOUT``) drops weights drawn by Philox from a seed and the weight's position (``tiles.dropout_keep``)
in the output pass and again in the backward kernels, as FlashAttention does.

Scores, thresholds and statistics are float32 whatever the input dtype (a generic
alpha with half-precision inputs stops Newton at float16's tolerance: ``config.tolerance``);
products with v and dO take p and ds in the input dtype, as FlashAttention does.  Under
``TRITON_INTERPRET=1`` (set before import) the kernels run on CPU tensors.

How the kernels are laid out on the device (never what they compute: every configuration
gives the same attention, to rounding) is a ``KernelConfig`` argument, ``PACKAGE`` unless a
caller says otherwise.  The solver is the one that won its measurements against a plain
Newton from 0 and against richer starts (docs/notes/fused-attention.md); only it is built.
"""

import torch
import triton
import triton.language as tl

from ..reference import MAX_NEWTON_ITER
from .call import Forward, causal_kind, packing_args, padding_arg, slopes_arg
from .config import (DIAG_PASSES_C, DIAG_TILES_C, KEPT_SLOTS_C, NUM_DIAGNOSTICS, NUM_DIAGNOSTICS_C, NUM_STATS,
                     NUM_STATS_C, SC_CLOSED, STAT_C_C, STAT_G_C, STAT_MAX_C, STAT_MU_C, STAT_P_C, STAT_TAU_C,
                     SUBSET_MARGIN, TINY, forward_blocks, precision, tolerance)
from .threshold import (certified_step, exp_remainder, may_hold, newton_step, positive_gap, prob_and_g,
                        subset_threshold, support_cut)
from .tiles import dot, dropout_apply, dropout_keep, key_range, program_head, scores, tile


@triton.jit
def _maxima(s_one, q, keys, offs_m, offs_nb, offs_d, n_begin, n_end, blocks,
            HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, PRECISION: tl.constexpr,
            ONE_TILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """1. (row_max, live, kept, kept_tile, least, visits): each row's maximum (0 for a row
    with no visible key, ``live`` false), its KEPT_SLOTS largest tile maxima and their key
    tiles (a tile's maximum replaces the least kept when it beats it), the least kept (every
    key tile left out of a row's slots lies at or below it); each tile's largest score is
    written to ``blocks``; ``visits`` counts the tiles whose scores it computed."""
    visits = 0
    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    slots = tl.arange(0, KEPT_SLOTS_C)
    kept = tl.full([BLOCK_M, KEPT_SLOTS_C], float("-inf"), tl.float32)
    kept_tile = tl.full([BLOCK_M, KEPT_SLOTS_C], -1, tl.int32)
    for start_n in range(n_begin, n_end, BLOCK_N):
        s = tile(s_one, q, keys, offs_m, start_n + offs_nb, offs_d, HAS_KPM, CAUSAL, PACKED, PRECISION, ONE_TILE)
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
    return row_max, live, kept, kept_tile, tl.min(kept, axis=1), visits


@triton.jit
def _newton(s_one, q, keys, offs_m, offs_nb, offs_d, n_begin, n_end, blocks, row_max, live, kept, kept_tile, least,
            am1, k, tol, max_iter, visits,
            HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, FIXED: tl.constexpr,
            PRECISION: tl.constexpr, ONE_TILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """2. (tau, certified, passes, visits): Newton from the kept maxima's threshold, one pass
    over the key tiles that may hold support per step.  A row is ``certified`` once its
    threshold is known: a row without keys from the start; for alpha = 2 and 1.5, a row whose
    Newton pass certifies the exact threshold of its own support (``certified_step``).
    Certified rows step no more, and a tile whose rows are all certified makes no Newton
    pass; a tile found off the support at an iterate is marked -inf in ``blocks``."""
    certified = live == 0
    tau = subset_threshold(kept, row_max, live, am1, k, tol, FIXED, PRECISION)
    tau = tl.where(certified, tau, tl.maximum(tau - SUBSET_MARGIN, 0.0))
    step_max = tl.max(tl.where(certified, 0.0, 1.0), axis=0)
    it = 0
    passes = 1
    while (it < max_iter) & (step_max > tol):
        power = tl.zeros([BLOCK_M], tl.float32)
        s1 = tl.zeros([BLOCK_M], tl.float32)
        n_on = tl.zeros([BLOCK_M], tl.float32)
        least_gap = tl.full([BLOCK_M], 2.0, tl.float32)
        cut = support_cut(row_max, tau, am1, live)
        for start_n in range(n_begin, n_end, BLOCK_N):
            if may_hold(blocks, start_n // BLOCK_N, cut, kept, kept_tile, least):
                s = tile(s_one, q, keys, offs_m, start_n + offs_nb, offs_d, HAS_KPM, CAUSAL, PACKED, PRECISION,
                         ONE_TILE)
                gap = positive_gap(s, row_max, tau, am1)
                visits += 1
                if tl.max(tl.max(gap, axis=1), axis=0) > 0.0:
                    gk, gkm1, _ = prob_and_g(gap, k, FIXED, PRECISION)  # gap^k and gap^(k - 1)
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
        step = newton_step(power, s1, am1, live)
        if FIXED != 0:
            d, now = certified_step(power, s1, n_on, least_gap, step, FIXED)
            certified = certified | now
            step = tl.where(certified, tl.where(live, d, 0.0), step)
        else:
            step = tl.where(certified, 0.0, step)
        tau += step
        step_max = tl.max(tl.where(certified, 0.0, tl.abs(step)), axis=0)
        it += 1
    return tau, certified, passes, visits


@triton.jit
def _polish(s_one, q, keys, offs_m, offs_nb, offs_d, n_begin, n_end, blocks, row_max, live, kept, kept_tile, least,
            am1, tau, certified, passes, visits,
            HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, FIXED: tl.constexpr,
            PRECISION: tl.constexpr, ONE_TILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """3. (tau, passes, visits): the exact threshold on the support found (sparsemax,
    1.5-entmax), where a row is left that the Newton passes did not certify."""
    if tl.min(certified.to(tl.int32), axis=0) == 0:
        n_on = tl.zeros([BLOCK_M], tl.float32)
        z_sum = tl.zeros([BLOCK_M], tl.float32)
        z_sq = tl.zeros([BLOCK_M], tl.float32)
        cut = support_cut(row_max, tau, am1, live)
        for start_n in range(n_begin, n_end, BLOCK_N):
            if may_hold(blocks, start_n // BLOCK_N, cut, kept, kept_tile, least):
                s = tile(s_one, q, keys, offs_m, start_n + offs_nb, offs_d, HAS_KPM, CAUSAL, PACKED, PRECISION,
                         ONE_TILE)
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
    return tau, passes, visits


@triton.jit
def _output(s_one, q, keys, v_base, svn, svd, offs_m, offs_nb, offs_d, n_begin, n_end, blocks, row_max, live,
            kept, kept_tile, least, am1, k, tau, Tq, Tk, D, bh, seed, p_drop, visits,
            HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, FIXED: tl.constexpr,
            DROPOUT: tl.constexpr, ALPHA_STATS: tl.constexpr, WRITE_OG: tl.constexpr, PRECISION: tl.constexpr,
            ONE_TILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """4. (o, og, G, P, sum p log p, support size, visits) of each row, og only with WRITE_OG
    and the last two only with ALPHA_STATS; ``blocks`` is left -inf exactly at the key tiles
    without support (the backward's block mask)."""
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    acc_g = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    g_sum = tl.zeros([BLOCK_M], tl.float32)
    p_sum = tl.zeros([BLOCK_M], tl.float32)
    plogp = tl.zeros([BLOCK_M], tl.float32)
    n_on = tl.zeros([BLOCK_M], tl.float32)
    cut = support_cut(row_max, tau, am1, live)
    for start_n in range(n_begin, n_end, BLOCK_N):
        support = False
        if may_hold(blocks, start_n // BLOCK_N, cut, kept, kept_tile, least):
            offs_n = start_n + offs_nb
            s = tile(s_one, q, keys, offs_m, offs_n, offs_d, HAS_KPM, CAUSAL, PACKED, PRECISION, ONE_TILE)
            gap = positive_gap(s, row_max, tau, am1)
            visits += 1
            if tl.max(tl.max(gap, axis=1), axis=0) > 0.0:  # a tile without support adds nothing
                support = True
                p, g, log_p = prob_and_g(gap, k, FIXED, PRECISION)
                v = tl.load(v_base + offs_n[:, None] * svn + offs_d[None, :] * svd,
                            mask=(offs_n[:, None] < Tk) & (offs_d[None, :] < D), other=0.0)
                keep = dropout_keep(seed, bh, offs_m, offs_n, Tq, Tk, p_drop, DROPOUT)
                acc += dot(dropout_apply(p, keep, p_drop, DROPOUT).to(v.dtype), v, PRECISION)
                if WRITE_OG:  # og = sum_j g_ij dp_ij / dO_i with the dropped weights' upstream gradient
                    acc_g += dot(dropout_apply(g, keep, p_drop, DROPOUT).to(v.dtype), v, PRECISION)
                g_sum += tl.sum(g, axis=1)
                p_sum += tl.sum(p, axis=1)
                if ALPHA_STATS:
                    plogp += tl.sum(tl.where(p > 0.0, p * log_p, 0.0), axis=1)
                    n_on += tl.sum((p > 0.0).to(tl.float32), axis=1)
        if not support:
            tl.store(blocks + start_n // BLOCK_N, float("-inf"))
    return acc, acc_g, g_sum, p_sum, plogp, n_on, visits


@triton.jit
def _alpha_statistics(s_one, q, keys, offs_m, offs_nb, offs_d, n_begin, n_end, blocks, row_max, live, am1, k, tau,
                      g_sum, p_sum, plogp, n_on, passes, visits,
                      HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, FIXED: tl.constexpr,
                      PRECISION: tl.constexpr, ONE_TILE: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr):
    """(mu, c, passes, visits) for the alpha gradient: mu = sum yhat log y and c = log1p(sc),
    sc = sum yhat phi(delta (log y - mu)), yhat = y / P.  Since y^-delta = 1 / gap,
    sum yhat y^-delta = G / P and sc = exp(delta mu) G / P - 1: no pass over the keys.  That
    is a difference of nearly equal numbers when sc is small (alpha near 1, flat rows:
    float32 leaves it an absolute error of a few 1e-6), so a tile with a row below SC_CLOSED
    sums the series term by term in one more pass over the tiles that hold support (a row
    whose support is one key has sc = 0 exactly)."""
    p_safe = tl.maximum(p_sum, TINY)
    mu = plogp / p_safe
    sc = tl.where(n_on > 1.0, tl.maximum(tl.exp(am1 * mu) * (g_sum / p_safe) - 1.0, 0.0), 0.0)
    small = live & (n_on > 1.0) & (sc < SC_CLOSED)
    if tl.max(small.to(tl.int32), axis=0) > 0:
        acc_c = tl.zeros([BLOCK_M], tl.float32)
        for start_n in range(n_begin, n_end, BLOCK_N):
            if tl.load(blocks + start_n // BLOCK_N) > float("-inf"):  # the tiles that hold support
                s = tile(s_one, q, keys, offs_m, start_n + offs_nb, offs_d, HAS_KPM, CAUSAL, PACKED, PRECISION,
                         ONE_TILE)
                gap = positive_gap(s, row_max, tau, am1)
                p, g, log_p = prob_and_g(gap, k, FIXED, PRECISION)
                u = log_p - mu[:, None]
                acc_c += tl.sum(tl.where(p > 0.0, p * exp_remainder(am1 * u), 0.0), axis=1)
                visits += 1
        sc = acc_c / p_safe
        passes += 1
    # log1p(sc): its series where 1 + sc would round (sc >= 0).
    c = tl.where(sc < 1e-3, sc * (1.0 - sc * (0.5 - sc * (1.0 / 3.0 - sc * 0.25))), tl.log(1.0 + sc))
    return mu, c, passes, visits


@triton.jit
def _forward_kernel(Q, K, V, ALPHA, SLOPES, KPM, O, OG, STATS, BLOCKS, SEG, BOUNDS, DIAGNOSTICS_OUT,
                    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                    sob, soh, som, sod, skpb, H, H_KV, Tq, Tk, D, scale, tol, max_iter, n_tiles, p_drop, seed, window,
                    HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr, FIXED: tl.constexpr,
                    DROPOUT: tl.constexpr,
                    ALPHA_STATS: tl.constexpr, WRITE_OG: tl.constexpr, ONE_TILE: tl.constexpr, PRECISION: tl.constexpr,
                    DIAGNOSTICS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One query tile of one (batch, head): the phases in turn (the module's docstring)."""
    pid_m = tl.program_id(0)
    bh, b, h, kv, alpha, am1, k = program_head(ALPHA, H, H_KV)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_nb = tl.arange(0, BLOCK_N)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                mask=(offs_m[:, None] < Tq) & (offs_d[None, :] < D), other=0.0)
    keys = (K + b * skb + kv * skh, skn, skd, KPM + b * skpb, SEG + b * Tk, Tq, Tk, D, scale, window,
            tl.load(SLOPES + h))
    n_begin, n_end = key_range(start_m, Tq, Tk, window, BOUNDS + (b * tl.num_programs(0) + pid_m) * 2, BLOCK_M,
                               BLOCK_N, CAUSAL, PACKED)
    # Each key tile's largest score, from the maxima's pass; -inf once the tile is known to
    # hold no support for any row of this query tile, which later passes then skip (the
    # output pass leaves -inf exactly where the tile has no support: the backward's block mask).
    blocks = BLOCKS + (bh * tl.num_programs(0) + pid_m) * n_tiles
    # Keys that all fit one tile (short sentences, as in training): their scores are computed
    # once, here, and every pass reads them from registers instead of recomputing them from
    # q and k (``tiles.tile``), so q and k are read once.
    s_one = 0.0
    if ONE_TILE:
        s_one = scores(q, keys, offs_m, offs_nb, offs_d, HAS_KPM, CAUSAL, PACKED, PRECISION)

    row_max, live, kept, kept_tile, least, visits = _maxima(
        s_one, q, keys, offs_m, offs_nb, offs_d, n_begin, n_end, blocks, HAS_KPM, CAUSAL, PACKED, PRECISION, ONE_TILE,
        BLOCK_M, BLOCK_N)
    tau, certified, passes, visits = _newton(
        s_one, q, keys, offs_m, offs_nb, offs_d, n_begin, n_end, blocks, row_max, live, kept, kept_tile, least,
        am1, k, tol, max_iter, visits, HAS_KPM, CAUSAL, PACKED, FIXED, PRECISION, ONE_TILE, BLOCK_M, BLOCK_N)
    if FIXED != 0:
        tau, passes, visits = _polish(
            s_one, q, keys, offs_m, offs_nb, offs_d, n_begin, n_end, blocks, row_max, live, kept, kept_tile, least,
            am1, tau, certified, passes, visits, HAS_KPM, CAUSAL, PACKED, FIXED, PRECISION, ONE_TILE, BLOCK_M, BLOCK_N)
    acc, acc_g, g_sum, p_sum, plogp, n_on, visits = _output(
        s_one, q, keys, V + b * svb + kv * svh, svn, svd, offs_m, offs_nb, offs_d, n_begin, n_end, blocks, row_max,
        live, kept, kept_tile, least, am1, k, tau, Tq, Tk, D, bh, seed, p_drop, visits, HAS_KPM, CAUSAL, PACKED,
        FIXED, DROPOUT, ALPHA_STATS, WRITE_OG, PRECISION, ONE_TILE, BLOCK_M, BLOCK_N, BLOCK_D)
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
        mu, c, passes, visits = _alpha_statistics(
            s_one, q, keys, offs_m, offs_nb, offs_d, n_begin, n_end, blocks, row_max, live, am1, k, tau, g_sum,
            p_sum, plogp, n_on, passes, visits, HAS_KPM, CAUSAL, PACKED, FIXED, PRECISION, ONE_TILE, BLOCK_M, BLOCK_N)
        tl.store(stats + STAT_MU_C * Tq, mu, mask=row_ok)
        tl.store(stats + STAT_C_C * Tq, c, mask=row_ok)
    if DIAGNOSTICS:
        counts = DIAGNOSTICS_OUT + (bh * NUM_DIAGNOSTICS_C) * Tq + offs_m
        tl.store(counts + DIAG_PASSES_C * Tq, tl.zeros([BLOCK_M], tl.float32) + passes, mask=row_ok)
        tl.store(counts + DIAG_TILES_C * Tq, tl.zeros([BLOCK_M], tl.float32) + visits, mask=row_ok)


def forward(q, k, v, alpha_heads, call, alpha_stats, backward=True):
    """A :class:`~.call.Forward` (o, og, stats, blocks, diagnostics) for q (B, H, Tq, D), k and
    v (B, H_kv, Tk, D) (H_kv dividing H: query head h reads key/value head h // (H / H_kv),
    grouped-query attention, without the key/value heads repeated in memory); ``alpha_heads``
    float32 (H,); ``call`` a :class:`~.call.Call`.  ``alpha_stats``: the statistics of the
    alpha gradient too.  Without ``backward`` (inference) og is not computed (None).
    ``blocks`` (B * H, query tiles, key tiles), float32, is -inf where a (query tile, key
    tile) pair holds no support (or lies past the causal diagonal), else the tile's largest
    score: the backward kernels visit only the pairs that hold support (4 bytes a pair:
    1 / 1,024 of the scores' size at 64 x 64 tiles).  ``diagnostics`` (B * H,
    NUM_DIAGNOSTICS, Tq) with ``call.config.diagnostics``, else None."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    config = call.config
    o = torch.empty_like(q)
    og = torch.empty_like(q) if backward else None
    stats = torch.zeros((B * H, NUM_STATS, Tq), dtype=torch.float32, device=q.device)
    counts = torch.zeros((B * H, NUM_DIAGNOSTICS, Tq), dtype=torch.float32, device=q.device) \
        if config.diagnostics else None
    block_m, block_n, block_d, launch, single = forward_blocks(D, Tk, q.device.type, config)
    kpm = padding_arg(call.key_padding_mask, q)
    grid = (triton.cdiv(Tq, block_m), B * H)
    n_tiles = triton.cdiv(Tk, block_n)
    blocks = torch.full((B * H, grid[0], n_tiles), float("-inf"), dtype=torch.float32, device=q.device)
    seg, bounds = packing_args(call.packed, block_m, q)
    _forward_kernel[grid](
        q, k, v, alpha_heads, slopes_arg(call.slopes, alpha_heads), kpm, o, og if backward else o, stats, blocks, seg,
        bounds, stats if counts is None else counts, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        kpm.stride(0), H, k.shape[1], Tq, Tk, D, call.scale, tolerance(q, call.fixed, config), MAX_NEWTON_ITER,
        n_tiles, float(call.dropout), int(call.seed), int(call.window or 0), DROPOUT=call.dropout > 0,
        HAS_KPM=call.key_padding_mask is not None, CAUSAL=causal_kind(call), PACKED=call.packed is not None,
        FIXED=call.fixed, ALPHA_STATS=alpha_stats, WRITE_OG=backward, ONE_TILE=single, PRECISION=precision(q),
        DIAGNOSTICS=config.diagnostics, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, **launch)
    return Forward(o, og, stats, blocks, counts)
