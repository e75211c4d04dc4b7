"""The fused attention's backward pass, from what the forward pass stored (``forward_pass``).

The backward pass recomputes p and g from q, k and the stored (max, tau):

    dv_j = sum_i p_ij dO_i,   dp_ij = dO_i.v_j,   ds_ij = g_ij (dp_ij - r_i),
    r_i = dO_i.og_i / G_i,    dq_i = scale sum_j ds_ij k_j,   dk_j = scale sum_i ds_ij q_i,

one kernel over key tiles (dk, dv, summed over the query heads that read the key/value
head) and one over query tiles (dq, and each row's alpha gradient, Correia et al. 2019,
Prop. 1 in ``reference.alpha_gradient``'s stable form), summed per head outside; with
dropout, dp is the dropped weights' upstream gradient and og = sum g v over them.

The kernels read the forward's block mask where their tiles are the forward's (they differ
only where the forward took every key in one wider tile).
"""

import torch
import triton
import triton.language as tl

from .call import causal_kind, packing_args, padding_arg, slopes_arg
from .config import NUM_STATS_C, STAT_C_C, STAT_G_C, STAT_MU_C, STAT_P_C, TINY, blocks, precision
from .threshold import exp_remainder, positive_gap, prob_and_g
from .tiles import (dot, dropout_apply, dropout_keep, head_alpha, key_range, keys_ok, masked_scores, program_head,
                    query_end, row_threshold, scores)


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
    present = keys_ok(KPM + b * skpb, offs_n, Tk, HAS_KPM)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    m_begin = 0
    if CAUSAL:  # rows before this one see none of these keys
        m_begin = tl.maximum(start_n - (Tk - Tq), 0) // BLOCK_M * BLOCK_M
    m_end = query_end(start_n, Tq, Tk, window, BLOCK_N, CAUSAL)
    seg_base = SEG + b * Tk
    if PACKED:  # only the rows of the sequences this key tile belongs to
        bounds = BOUNDS + (b * tl.num_programs(0) + pid_n) * 2
        m_begin = tl.maximum(m_begin, tl.load(bounds) // BLOCK_M * BLOCK_M)
        m_end = tl.minimum(m_end, tl.load(bounds + 1))
    for member in range(0, groups):
        h = kv * groups + member
        bh = b * H + h
        alpha, am1, k = head_alpha(ALPHA, h)
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
                row_max, tau, r = row_threshold(stats, R + bh * Tq, offs_m, row_ok, Tq)
                s = masked_scores(dot(q, kt, PRECISION) * scale, offs_m, offs_n, present, Tq, Tk, window, slope,
                                  seg_base, CAUSAL, PACKED)
                gap = positive_gap(s, row_max, tau, am1)
                if tl.max(tl.max(gap, axis=1), axis=0) > 0.0:
                    p, g, _ = prob_and_g(gap, k, FIXED, PRECISION)
                    keep = dropout_keep(seed, bh, offs_m, offs_n, Tq, Tk, p_drop, DROPOUT)
                    dv += dot(tl.trans(dropout_apply(p, keep, p_drop, DROPOUT).to(do.dtype)), do, PRECISION)
                    dp = dropout_apply(dot(do, vt, PRECISION), keep, p_drop, DROPOUT)  # d loss / d p
                    ds = g * (dp - r[:, None])
                    dk += dot(tl.trans(ds.to(q.dtype)), q, PRECISION)
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
    bh, b, h, kv, alpha, am1, k = program_head(ALPHA, H, H_KV)
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
    row_max, tau, r = row_threshold(stats, R + bh * Tq, offs_m, row_ok, Tq)
    if ALPHA_GRAD:
        p_safe = tl.maximum(tl.load(stats + STAT_P_C * Tq + offs_m, mask=row_ok, other=1.0), TINY)
        mu = tl.load(stats + STAT_MU_C * Tq + offs_m, mask=row_ok, other=0.0)
        c = tl.load(stats + STAT_C_C * Tq + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    dalpha = tl.zeros([BLOCK_M], tl.float32)
    keys = (k_base, skn, skd, kpm_base, SEG + b * Tk, Tq, Tk, D, scale, window, slope)
    n_begin, n_end = key_range(start_m, Tq, Tk, window, BOUNDS + (b * tl.num_programs(0) + pid_m) * 2, BLOCK_M,
                                BLOCK_N, CAUSAL, PACKED)
    blocks = BLOCKS + (bh * tl.num_programs(0) + pid_m) * n_tiles
    for start_n in range(n_begin, n_end, BLOCK_N):
        held = True
        if USE_BLOCKS:  # the forward's block mask: a key tile without support adds nothing
            held = tl.load(blocks + start_n // BLOCK_N) > float("-inf")
        if held:
            offs_n = start_n + offs_nb
            s = scores(q, keys, offs_m, offs_n, offs_d, HAS_KPM, CAUSAL, PACKED, PRECISION)
            gap = positive_gap(s, row_max, tau, am1)
            if tl.max(tl.max(gap, axis=1), axis=0) > 0.0:
                p, g, log_p = prob_and_g(gap, k, FIXED, PRECISION)
                kv_mask = (offs_n[:, None] < Tk) & (offs_d[None, :] < D)
                vt = tl.load(v_base + offs_n[None, :] * svn + offs_d[:, None] * svd,
                             mask=(offs_n[None, :] < Tk) & (offs_d[:, None] < D), other=0.0)
                k_tile = tl.load(k_base + offs_n[:, None] * skn + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
                keep = dropout_keep(seed, bh, offs_m, offs_n, Tq, Tk, p_drop, DROPOUT)
                dp = dropout_apply(dot(do, vt, PRECISION), keep, p_drop, DROPOUT)  # d loss / d p
                ds = g * (dp - r[:, None])
                dq += dot(ds.to(k_tile.dtype), k_tile, PRECISION)
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


def backward(q, k, v, do, og, stats, block_mask, alpha_heads, call, alpha_grad):
    """(dq, dk, dv, dalpha of each row (B*H, Tq) or None) for the forward's ``og``, ``stats``
    and ``block_mask`` (its ``blocks``) with the same ``call``; ``alpha_grad``: the alpha
    gradient too."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    # r_i = sum_j g_ij dp_ij / sum_j g_ij = dO_i . og_i / G_i (zero for a row without keys).
    rows = B * H * Tq
    r = torch.empty((B, H, Tq), dtype=torch.float32, device=q.device)
    block_m, block_n, block_d, launch = blocks(D, q.device.type, call.config)
    block_r = 16 if q.device.type == "cpu" else 64
    if rows:
        _r_kernel[(triton.cdiv(rows, block_r),)](do, og, stats, r, *do.stride(), *og.stride(), rows, H, Tq, D,
                                                 BLOCK_R=block_r, BLOCK_D=block_d)
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    dalpha = torch.empty((B * H, Tq), dtype=torch.float32, device=q.device) if alpha_grad else r
    kpm = padding_arg(call.key_padding_mask, q)
    n_m_tiles, n_tiles = triton.cdiv(Tq, block_m), triton.cdiv(Tk, block_n)
    # Tiles of two powers of two give the same counts only when one tile holds every key.
    use_blocks = tuple(block_mask.shape[1:]) == (n_m_tiles, n_tiles)
    common = dict(HAS_KPM=call.key_padding_mask is not None, CAUSAL=causal_kind(call), PACKED=call.packed is not None,
                  FIXED=call.fixed, USE_BLOCKS=use_blocks, DROPOUT=call.dropout > 0, PRECISION=precision(q),
                  BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, **launch)
    # q, k and v are dense (``dense``), so dq, dk and dv, made like them, share their strides;
    # dO is read in whatever layout autograd gives it.
    kv_heads = k.shape[1]
    seg, key_bounds = packing_args(call.packed, block_n, q)
    slopes = slopes_arg(call.slopes, alpha_heads)
    _dkdv_kernel[(n_tiles, B * kv_heads)](
        q, k, v, do, alpha_heads, slopes, kpm, stats, r, dk, dv, block_mask, seg, key_bounds, *q.stride(),
        *k.stride(), *v.stride(), *do.stride(), kpm.stride(0), H, kv_heads, Tq, Tk, D, call.scale, n_m_tiles, n_tiles,
        float(call.dropout), int(call.seed), int(call.window or 0), **common)
    _dq_kernel[(n_m_tiles, B * H)](
        q, k, v, do, alpha_heads, slopes, kpm, stats, r, dq, dalpha, block_mask, seg,
        packing_args(call.packed, block_m, q)[1], *q.stride(), *k.stride(), *v.stride(), *do.stride(), kpm.stride(0),
        H, kv_heads, Tq, Tk, D, call.scale, n_tiles, float(call.dropout), int(call.seed), int(call.window or 0),
        ALPHA_GRAD=alpha_grad, **common)
    return dq, dk, dv, (dalpha if alpha_grad else None)
