"""alpha-entmax attention, ``normalise(scale Q K^T) V``, fused on GPU.

    o_i = sum_j entmax_alpha(scale q_i.K^T)_j v_j

with sparsemax (alpha = 2), 1.5-entmax or alpha-entmax with one alpha per head
(Peters, Niculae & Martins, 2019; Correia, Niculae & Martins, "Adaptively Sparse
Transformers", EMNLP 2019), whose gradient in alpha is Prop. 1 of the latter.

On CUDA (and on CPU tensors under Triton's interpreter, when asked with
``use_backend("triton")``) the Triton kernels of ``attention_kernel.py`` run: the
(Tq, Tk) scores are recomputed tile by tile and never stored, so memory grows
with T, not T^2.  Elsewhere the reference path materialises the scores, a chunk of
queries at a time, and normalises them with :func:`entmax_alpha`.
"""

import operator

import torch
from torch.autograd import Function

from . import activations

try:
    from . import attention_kernel
    from .triton_kernel import fixed_kind  # the row-wise kernels' closed forms (1.5, 2)
except ImportError:  # no Triton
    attention_kernel = None

# Queries per chunk of the reference path: bounds the float32 scores held at once
# (while autograd keeps every chunk's probabilities for the backward pass).
REFERENCE_CHUNK = 1024


def _check(q, k, v, alpha, key_padding_mask, scale):
    """Refuse bad arguments, naming them; True where alpha is below FLOAT32_ALPHA_MIN (a
    CUDA tensor's values are not read: that would wait for the device)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"entmax_attention takes q, k, v of shape (B, H, T, D), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    B, H, _, D = q.shape
    if k.shape[0] != B or k.shape[1] < 1 or H % k.shape[1] or k.shape[3] != D or v.shape != k.shape:
        raise ValueError(f"entmax_attention: k and v must be (B={B}, H_kv, Tk, D={D}) with H_kv dividing H={H}, "
                         f"and alike, got {tuple(k.shape)} and {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"entmax_attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    near_one = False
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        if not 1.0 < float(alpha) <= 2.0:
            raise ValueError(f"entmax alpha must lie in (1, 2], got {alpha}")
        near_one = float(alpha) < activations.FLOAT32_ALPHA_MIN
    elif torch.is_tensor(alpha):
        if alpha.shape != (H,):
            raise ValueError(f"entmax_attention: a tensor alpha has one value per head, shape ({H},), "
                             f"got {tuple(alpha.shape)}")
        if not alpha.is_cuda:  # on the GPU this check would wait for the device
            near_one = activations.check_alpha_range(alpha) < activations.FLOAT32_ALPHA_MIN
    else:
        raise TypeError(f"entmax_attention: alpha must be a float or a tensor of shape ({H},), got {type(alpha)}")
    if key_padding_mask is not None:
        if key_padding_mask.dtype != torch.bool or key_padding_mask.shape != (B, k.shape[2]):
            raise ValueError(f"entmax_attention: key_padding_mask must be bool of shape (B={B}, Tk={k.shape[2]}), "
                             f"got {key_padding_mask.dtype} {tuple(key_padding_mask.shape)}")
    if scale is not None and not scale > 0:
        raise ValueError(f"entmax_attention: scale must be positive, got {scale}")
    return near_one


def uses_fused_kernel(q):
    """Whether ``entmax_attention`` runs the fused kernels for queries like ``q``: Triton
    present, a CUDA tensor (unless ``use_backend("torch")``) or a CPU tensor under Triton's
    interpreter inside ``use_backend("triton")``, and heads no wider than MAX_HEAD_DIM."""
    if attention_kernel is None or not attention_kernel.supports(q):
        return False
    if q.shape[-1] > attention_kernel.MAX_HEAD_DIM:  # wider heads would not fit the tiles in registers
        return False
    if q.is_cuda:
        return activations.current_backend() != "torch"
    return activations.current_backend() == "triton"  # CPU tensors: only under the interpreter, when asked


def entmax_attention(q, k, v, alpha, causal=False, key_padding_mask=None, scale=None, kernel=None, dropout=0.0,
                     window=None, cu_seqlens=None, alibi=None):
    """alpha-entmax attention of q (B, H, Tq, D) over k, v (B, H_kv, Tk, D); returns (B, H, Tq, D).

    With H_kv < H (grouped-query attention; H_kv divides H) query head h reads key/value head
    h // (H / H_kv); the fused kernels read them where they are, without repeating them.

    ``alpha``: a float in (1, 2] (2 is sparsemax), or a tensor of shape (H,), one per
    head, which may require grad; below ``FLOAT32_ALPHA_MIN`` the reference path runs
    in float64 (except for a CUDA tensor, whose values are not read).  ``key_padding_mask``:
    (B, Tk) bool, True at padding (fairseq's convention).  ``causal``: query i sees keys j <= i + Tk - Tq (the last
    query is aligned with the last key).  ``scale``: default 1 / sqrt(D).  A query that
    sees no key gets zeros (and zero gradients).  ``kernel``: how the fused kernels run, an
    ``attention_kernel.KernelConfig`` (None: the package's); it never changes the result.
    ``dropout``: attention dropout's probability (training): the fused kernels draw its
    pattern from a seed taken from torch's generator and regenerate it in the backward, so
    that the (Tq, Tk) weights are still never stored.  ``window`` (with ``causal``): a sliding
    window, query i sees only the ``window`` keys up to its own (as transformers' Mistral,
    Qwen2 and Gemma's local layers do); the fused kernels never visit the key tiles outside it.
    ``cu_seqlens``: packed sequences (FlashAttention's varlen form): one batch row (B = 1) of
    T = Tq = Tk positions holding sequences cu_seqlens[s]:cu_seqlens[s + 1], (S + 1,) integers
    from 0 to T; a query sees only its own sequence's keys (causal within it with ``causal``),
    and the fused kernels never visit the key tiles of other sequences.  ``alibi``: (H,) ALiBi
    slopes, ``-alibi[h] |i + Tk - Tq - j|`` added to head h's scores, inside the kernels' tiles.
    """
    dropout = check_dropout(dropout)
    window = check_window(window, causal)
    segments = sequence_ids(cu_seqlens, q, k)
    near_one = _check(q, k, v, alpha, key_padding_mask, scale)
    if alibi is not None and tuple(alibi.shape) != (q.shape[1],):
        raise ValueError(f"entmax_attention: alibi takes one slope per query head, ({q.shape[1]},), "
                         f"got {tuple(alibi.shape)}")
    scale = float(scale) if scale is not None else q.shape[-1] ** -0.5
    if isinstance(alpha, (int, float)):
        alpha = float(alpha)
    if uses_fused_kernel(q) and not near_one:
        fixed = fixed_kind(alpha)
        heads = alpha if torch.is_tensor(alpha) else torch.full((q.shape[1],), alpha, device=q.device)
        config = attention_kernel.PACKAGE if kernel is None else kernel
        # The seed from torch's CPU generator: seeded by torch.manual_seed, and no wait for a GPU.
        seed = int(torch.randint(0, 2**31 - 1, ())) if dropout > 0 else 0
        packed = None if segments is None else attention_kernel.packing(cu_seqlens, segments)
        return FusedEntmaxAttention.apply(q, k, v, heads, fixed, causal, key_padding_mask, scale, config, dropout,
                                          seed, window, packed, alibi)
    return reference_attention(q, k, v, alpha, causal, key_padding_mask, scale, dropout, window, cu_seqlens, alibi)


def sequence_ids(cu_seqlens, q, k):
    """(1, T) each position's sequence from ``cu_seqlens`` (None without it), refusing what
    does not describe packed sequences of q and k."""
    if cu_seqlens is None:
        return None
    if q.shape[0] != 1 or k.shape[2] != q.shape[2]:
        raise ValueError(f"attention: cu_seqlens packs sequences into one batch row of as many queries as keys, got "
                         f"q {tuple(q.shape)} and k {tuple(k.shape)}")
    return packed_ids(cu_seqlens, q.shape[2], q.device)


def packed_ids(cu_seqlens, length, device):
    """(1, length) each position's sequence: positions cu_seqlens[s]:cu_seqlens[s + 1] are
    sequence s; offsets that do not rise from 0 to ``length`` are refused."""
    cu_seqlens = torch.as_tensor(cu_seqlens)  # a list or array of offsets too
    cu = cu_seqlens.to(device, torch.long)
    if cu.dim() != 1 or len(cu) < 2 or cu_seqlens.dtype.is_floating_point:
        raise ValueError(f"attention: cu_seqlens must be (S + 1,) integers, got {tuple(cu_seqlens.shape)}")
    if int(cu[0]) != 0 or int(cu[-1]) != length or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"attention: cu_seqlens must rise from 0 to T = {length}, got {cu_seqlens.tolist()}")
    return torch.repeat_interleave(torch.arange(len(cu) - 1, device=device), cu.diff())[None]


def check_window(window, causal):
    """The sliding window as an int (a Python, numpy or torch integer), or None; refuses one
    that is not a positive whole number of keys, or without ``causal``."""
    if window is None:
        return None
    try:
        keys = None if isinstance(window, (bool, float)) else operator.index(window)
    except TypeError:
        keys = None
    if keys is None or keys < 1:
        raise ValueError(f"attention: window must be a positive number of keys, got {window!r}")
    if not causal:
        raise ValueError("attention: a sliding window is causal here; give causal=True with window")
    return keys


def check_dropout(dropout):
    """The attention dropout probability as a float (a Python, numpy or torch number),
    refused outside [0, 1) (NaN included), as transformers' eager attention refuses it."""
    try:
        p = float(dropout)
    except (TypeError, ValueError):
        p = float("nan")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"attention: dropout must lie in [0, 1), got {dropout!r}")
    return p


def visible(q_len, k_len, device, rows=None, window=None):
    """(Tq, Tk) bool: query i sees key j <= i + Tk - Tq, the causal mask of every attention of
    the package (the last query sees every key, as with cached keys), and with ``window`` only
    j > i + Tk - Tq - window (a sliding window); with ``rows`` (query indices), only those
    rows, so that a chunk of queries never builds the whole mask."""
    rows = torch.arange(q_len, device=device) if rows is None else rows
    keys, last = torch.arange(k_len, device=device)[None, :], rows[:, None] + (k_len - q_len)
    seen = keys <= last
    return seen if window is None else seen & (keys > last - window)


def keys_seen(q_len, k_len, device, causal=False, key_padding_mask=None, window=None, cu_seqlens=None):
    """(B or 1, Tq) long: how many keys each query may see under these masks (the n of a
    length scale), at least 1: under ``causal`` the unpadded keys up to its own (within
    ``window``), else every unpadded key; with packed sequences (``cu_seqlens``), only
    those of its own sequence.  O(Tq + Tk): no (Tq, Tk) mask is built."""
    kept = (~key_padding_mask).long() if key_padding_mask is not None \
        else torch.ones(1, k_len, dtype=torch.long, device=device)
    before = torch.nn.functional.pad(kept.cumsum(1), (1, 0))  # (B, Tk + 1): unpadded keys before each index
    rows = torch.arange(q_len, device=device)
    last = rows + (k_len - q_len) if causal else torch.full_like(rows, k_len - 1)
    first = torch.zeros_like(rows)
    if cu_seqlens is not None:
        cu = torch.as_tensor(cu_seqlens).to(device, torch.long)
        sequence = packed_ids(cu, q_len, device)[0]
        first = cu[sequence]
        if not causal:
            last = cu[sequence + 1] - 1
    if window is not None:
        first = torch.maximum(first, last - window + 1)
    return (before[:, last + 1] - before[:, first]).clamp(min=1)


def _score_mask(Tq, Tk, causal, key_padding_mask, rows, device, window=None, segments=None):
    """True where a score is masked, broadcastable to (B, H, len(rows), Tk)."""
    mask = torch.zeros((1, 1, len(rows), Tk), dtype=torch.bool, device=device)
    if segments is not None:
        mask = mask | (segments[:, None, rows, None] != segments[:, None, None, :])
    if causal:
        mask = mask | ~visible(Tq, Tk, device, rows, window)[None, None]
    if key_padding_mask is not None:
        mask = mask | key_padding_mask[:, None, None, :]
    return mask


def repeat_kv(states, heads):
    """(B, H_kv, T, D) -> (B, heads, T, D), each key/value head serving heads / H_kv query
    heads in turn (grouped-query attention, as transformers' ``repeat_kv``)."""
    B, H_kv, T, D = states.shape
    if H_kv == heads:
        return states
    return states[:, :, None].expand(B, H_kv, heads // H_kv, T, D).reshape(B, heads, T, D)


def reference_attention(q, k, v, alpha, causal=False, key_padding_mask=None, scale=None, dropout=0.0, window=None,
                        cu_seqlens=None, alibi=None):
    """The same attention with the scores materialised, REFERENCE_CHUNK queries at a time,
    normalised by :func:`entmax_alpha` (float32 for half inputs), attention dropout applied
    to the weights by ``F.dropout``; any device."""
    dropout = check_dropout(dropout)
    window = check_window(window, causal)
    scale = float(scale) if scale is not None else q.shape[-1] ** -0.5
    segments = sequence_ids(cu_seqlens, q, k)
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    Tq, Tk = q.shape[2], k.shape[2]
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    fixed = None if torch.is_tensor(alpha) else {2.0: activations.sparsemax, 1.5: activations.entmax15}.get(alpha)
    if torch.is_tensor(alpha):
        alpha = alpha.to(compute).view(1, -1, 1, 1)
    outputs = []
    for start in range(0, Tq, REFERENCE_CHUNK):
        rows = torch.arange(start, min(start + REFERENCE_CHUNK, Tq), device=q.device)
        scores = torch.matmul(q[:, :, start:start + len(rows)].to(compute), k.to(compute).transpose(-1, -2)) * scale
        if alibi is not None:  # ALiBi on these rows only (positions.alibi_bias's, without the whole (Tq, Tk))
            distance = (rows[:, None] + (Tk - Tq) - torch.arange(Tk, device=q.device)[None, :]).abs()
            scores = scores - alibi.to(compute).view(1, -1, 1, 1) * distance.to(compute)
        scores = scores.masked_fill(_score_mask(Tq, Tk, causal, key_padding_mask, rows, q.device, window, segments),
                                    float("-inf"))
        probs = fixed(scores, dim=-1) if fixed else activations.entmax_alpha(scores, alpha, dim=-1)
        if dropout > 0:
            probs = torch.nn.functional.dropout(probs, p=dropout)
        outputs.append(torch.matmul(probs, v.to(compute)).to(q.dtype))
    return torch.cat(outputs, dim=2) if outputs else q.new_zeros(q.shape[:3] + (v.shape[-1],))


class FusedEntmaxAttention(Function):
    """The Triton kernels as an autograd Function; ``alpha_heads`` is (H,), float32 or not;
    ``config`` an ``attention_kernel.KernelConfig``; ``packed`` an ``attention_kernel.Packing``,
    made once for the forward and the backward."""

    @staticmethod
    def forward(ctx, q, k, v, alpha_heads, fixed, causal, key_padding_mask, scale, config, dropout=0.0, seed=0,
                window=None, packed=None, slopes=None):
        q, k, v = (attention_kernel.dense(t) for t in (q, k, v))  # no copy of a permuted projection
        kpm = key_padding_mask.contiguous().view(torch.int8) if key_padding_mask is not None else None
        heads = alpha_heads.detach().to(torch.float32).contiguous()
        alpha_grad = alpha_heads.requires_grad
        # Inference (no input needs a gradient) skips og, the backward pass's statistic.
        o, og, stats, blocks = attention_kernel.forward(q, k, v, heads, fixed, causal, kpm, scale,
                                                        alpha_stats=alpha_grad,
                                                        backward=any(ctx.needs_input_grad[:4]), config=config,
                                                        dropout=dropout, seed=seed, window=window,
                                                        packed=packed, slopes=slopes)
        ctx.save_for_backward(q, k, v, og, stats, blocks, heads, kpm)
        ctx.fixed, ctx.causal, ctx.scale, ctx.alpha_dtype, ctx.config = fixed, causal, scale, alpha_heads.dtype, config
        ctx.dropout, ctx.seed, ctx.window, ctx.packed, ctx.slopes = dropout, seed, window, packed, slopes
        return o

    @staticmethod
    def backward(ctx, do):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "entmax_attention's fused kernel has no double backward (torch.autograd.grad(..., "
                "create_graph=True)): its gradients would have no history and a gradient penalty would be silently "
                "dropped; compute such a loss on the explicit path (reference_attention, or entmax_attention "
                "inside use_backend(\"torch\")), whose normalisers support it")
        q, k, v, og, stats, blocks, heads, kpm = ctx.saved_tensors
        alpha_grad = ctx.needs_input_grad[3]
        dq, dk, dv, dalpha_rows = attention_kernel.backward(
            q, k, v, do, og, stats, blocks, heads, ctx.fixed, ctx.causal, kpm, ctx.scale, alpha_grad, ctx.config,
            dropout=ctx.dropout, seed=ctx.seed, window=ctx.window, packed=ctx.packed, slopes=ctx.slopes)
        dalpha = None
        if alpha_grad:
            B, H = q.shape[:2]
            dalpha = dalpha_rows.view(B, H, -1).sum(dim=(0, 2)).to(ctx.alpha_dtype)
        return dq, dk, dv, dalpha, None, None, None, None, None, None, None, None, None, None
