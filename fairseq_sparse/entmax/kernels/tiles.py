"""What every attention kernel does to a tile: its scores, its masks, the key and query
tiles within reach, its head, and attention dropout's pattern.

A forward pass reads a tile's scores through ``keys``, a tuple that its kernel builds once
per (batch, head) and passes down: (k_base, skn, skd, kpm_base, seg_base, Tq, Tk, D, scale,
window, slope).
"""

import triton
import triton.language as tl

from .config import STAT_MAX_C, STAT_TAU_C, WINDOWED_C


@triton.jit
def dot(a, b, PRECISION: tl.constexpr):
    """a @ b with float32 accumulation.  Triton's interpreter multiplies bfloat16 as raw
    bits, so there the operands (already rounded to their dtype) are widened first."""
    if PRECISION == "interpret":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def scores(q, keys, offs_m, offs_n, offs_d, HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr,
           PRECISION: tl.constexpr):
    """Scaled scores of a (BLOCK_M, BLOCK_N) tile, -inf outside the rows, keys and masks."""
    k_base, skn, skd, kpm_base, seg_base, Tq, Tk, D, scale, window, slope = keys
    kt = tl.load(k_base + offs_n[None, :] * skn + offs_d[:, None] * skd,
                 mask=(offs_n[None, :] < Tk) & (offs_d[:, None] < D), other=0.0)
    s = dot(q, kt, PRECISION) * scale
    present = keys_ok(kpm_base, offs_n, Tk, HAS_KPM)
    return masked_scores(s, offs_m, offs_n, present, Tq, Tk, window, slope, seg_base, CAUSAL, PACKED)


@triton.jit
def tile(s_one, q, keys, offs_m, offs_n, offs_d, HAS_KPM: tl.constexpr, CAUSAL: tl.constexpr, PACKED: tl.constexpr,
         PRECISION: tl.constexpr, ONE_TILE: tl.constexpr):
    """A key tile's scores in a forward pass: with ONE_TILE (every key in the first tile) the
    ones the kernel computed once, else recomputed from q and k."""
    if ONE_TILE:
        return s_one
    else:
        return scores(q, keys, offs_m, offs_n, offs_d, HAS_KPM, CAUSAL, PACKED, PRECISION)


@triton.jit
def keys_ok(kpm_ptr, offs_n, Tk, HAS_KPM: tl.constexpr):
    """Which keys of a tile exist and are not padding."""
    ok = offs_n < Tk
    if HAS_KPM:
        ok = ok & (tl.load(kpm_ptr + offs_n, mask=ok, other=1) == 0)
    return ok


@triton.jit
def masked_scores(s, offs_m, offs_n, keys_ok, Tq, Tk, window, slope, seg_ptr, CAUSAL: tl.constexpr,
                  PACKED: tl.constexpr):
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
def dropout_keep(seed, bh, offs_m, offs_n, Tq, Tk, p_drop, DROPOUT: tl.constexpr):
    """Attention dropout's pattern for a tile: True where weight (i, j) of head bh is kept,
    drawn by Philox from (seed, its position), so that the backward kernels regenerate it
    (as FlashAttention does) instead of storing it; without DROPOUT, True."""
    if DROPOUT:
        offset = (bh.to(tl.int64) * Tq + offs_m[:, None]) * Tk + offs_n[None, :]
        return tl.rand(seed, offset) >= p_drop
    else:
        return True


@triton.jit
def dropout_apply(x, keep, p_drop, DROPOUT: tl.constexpr):
    """x with the dropped weights zeroed and the kept ones scaled by 1 / (1 - p_drop)."""
    if DROPOUT:
        return tl.where(keep, x / (1.0 - p_drop), 0.0)
    else:
        return x


@triton.jit
def head_alpha(ALPHA, h):
    """Head h's alpha, alpha - 1 and 1 / (alpha - 1)."""
    alpha = tl.load(ALPHA + h)
    return alpha, alpha - 1.0, 1.0 / (alpha - 1.0)


@triton.jit
def program_head(ALPHA, H, H_KV):
    """This program's (batch x head index, batch, query head, the key/value head it reads:
    grouped-query attention) and its head's alpha, alpha - 1 and 1 / (alpha - 1)."""
    bh = tl.program_id(1)
    h = bh % H
    alpha, am1, k = head_alpha(ALPHA, h)
    return bh, bh // H, h, h // (H // H_KV), alpha, am1, k


@triton.jit
def row_threshold(stats, r_ptr, offs_m, row_ok, Tq):
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
def key_range(start_m, Tq, Tk, window, bounds, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
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
def query_end(start_n, Tq, Tk, window, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """One past the last query that may see a key of the key tile at ``start_n``: later rows'
    windows have all passed it."""
    if CAUSAL == WINDOWED_C:
        return tl.minimum(tl.maximum(start_n + BLOCK_N - 1 + window - (Tk - Tq), 0), Tq)
    else:
        return Tq
