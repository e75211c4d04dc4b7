"""The one attention entry point: ``normalise(scale Q K^T + masks) V`` for any registered
normaliser, deciding once between the fused kernels and the explicit path.

    out, probs = attend(q, k, v, get_normalizer("alpha_entmax"), alpha=head_alpha(), causal=True)

Every attention of the package calls it: the fairseq module
(:class:`~fairseq_sparse.modules.AlphaEntmaxAttention`) and the Hugging Face attention
function (:mod:`fairseq_sparse.hf`) only reshape their framework's tensors and keep their
framework's state (incremental decoding, caches), as transformers' ``sdpa_attention_forward``
does.

- **Fused**, where :func:`~.fused_attention.uses_fused_kernel` says the kernels run (CUDA,
  or CPU tensors under Triton's interpreter in ``use_backend("triton")``), no weights are
  asked for and the masks are a causal mask and/or key padding: the sparse normalisers
  through :func:`~.fused_attention.entmax_attention` (the (Tq, Tk) scores are never
  stored; attention dropout inside the kernels), softmax through PyTorch's SDPA.  An additive ``mask`` that is
  exactly key padding and/or causal (as transformers builds them), or causal within the
  sliding ``window`` the caller names, or packed sequences (one batch row of sequences that
  see only themselves, causal or not), is read as such.
- **Explicit** everywhere else: the float32 scores, the masks, the normaliser, dropout,
  the product with V; the probabilities are returned when asked for.

Shapes: q (B, H, Tq, D), k and v (B, H_kv, Tk, D), H_kv dividing H (grouped-query
attention: query head h reads key/value head h // (H / H_kv); the fused kernels read them
without repeating them, the explicit path repeats them); query i sees keys j <= i + Tk - Tq when
``causal`` (the last query aligned with the last key, as with cached keys), and with a sliding
``window`` only the ``window`` keys up to that one.  A query that
sees no key gets zeros from the sparse normalisers, and from softmax on the fused path.
"""

import functools

import torch
import torch.nn.functional as F

from . import fused_attention
from .activations import FLOAT32_ALPHA_MIN
from .fused_attention import check_dropout, check_window, keys_seen, repeat_kv, sequence_ids, visible
from .positions import alibi_bias



def attend(q, k, v, normalizer, alpha=None, alpha_min=FLOAT32_ALPHA_MIN, causal=False, key_padding_mask=None,
           mask=None, scale=None, dropout=0.0, need_weights=False, fused=True, config=None, window=None,
           cu_seqlens=None, length_scale=None, alibi=None):
    """(output (B, H, Tq, D), probabilities (B, H, Tq, Tk) in float32 from the explicit path,
    None from the fused one; ``need_weights`` keeps the explicit path to have them).

    ``normalizer``: a registry entry (:func:`~.normalizers.get_normalizer`); ``alpha``: its
    per-head alphas, shape (H,), for a learned one, whose lower bound is ``alpha_min``.
    ``key_padding_mask``: (B, Tk) bool, True at padding.  ``mask``: any other mask,
    broadcastable to (B, H, Tq, Tk), bool (True: attend) or additive (a large negative
    value, the dtype's lowest, masks a key exactly under the sparse normalisers).
    ``window``: a sliding window of the causal mask (with ``causal``, it masks; with a
    ``mask``, the mask is read as causal within it where it is exactly that, and taken as
    it is otherwise, as transformers' sliding-window layers give both).  ``cu_seqlens``:
    packed sequences, (S + 1,) offsets into one batch row of as many queries as keys
    (:func:`~.fused_attention.entmax_attention`).
    ``length_scale``: a callable (a :class:`~.length_scale.LengthScale` bound to the layer
    input) from the keys each query sees, (B or 1, Tq), to the queries' factor, broadcastable
    to (B, H, Tq, 1): the queries are multiplied by it before the scores.  ``alibi``: (H,)
    ALiBi slopes (:mod:`~.positions`), ``-slope_h |i + Tk - Tq - j|`` added to the scores
    (a zero slope: no bias on that head), inside the fused kernels' tiles for the sparse
    normalisers; softmax with ALiBi takes the explicit path.
    ``scale``: default 1 / sqrt(D).  ``dropout``: the attention dropout probability to apply
    (0 outside training).  ``fused=False`` keeps the explicit path (benchmarks compare the
    two); ``config``: the fused kernels' ``KernelConfig`` (None: the package's).  Neither
    changes the result beyond rounding.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"attention: {heads} query heads cannot share {kv_heads} key/value heads")
    if normalizer.learned and alpha is None:
        raise ValueError(f"attention normaliser {normalizer.name!r}: learned, so it needs one alpha per head")
    window = check_window(window, causal or mask is not None)
    dropout = check_dropout(dropout)
    if alibi is not None and tuple(alibi.shape) != (heads,):
        raise ValueError(f"attention: alibi takes one slope per query head, ({heads},), got {tuple(alibi.shape)}")
    if fused and not need_weights and (alibi is None or normalizer.sparse) and fused_attention.uses_fused_kernel(q):
        masks = fused_masks(mask, causal, key_padding_mask, q.shape[0], q.shape[2], k.shape[2], window, cu_seqlens)
        if masks is not None and not (normalizer.learned and alpha_min < FLOAT32_ALPHA_MIN):
            causal, key_padding_mask, window, cu_seqlens = masks
            if length_scale is not None:
                seen = keys_seen(q.shape[2], k.shape[2], q.device, causal, key_padding_mask, window, cu_seqlens)
                q = q * length_scale(seen).to(q.dtype)
            if normalizer.sparse:
                heads = alpha if normalizer.learned else normalizer.alpha
                return fused_attention.entmax_attention(q, k, v, heads, causal=causal,
                                                        key_padding_mask=key_padding_mask, scale=scale,
                                                        kernel=config, dropout=dropout, window=window,
                                                        cu_seqlens=cu_seqlens, alibi=alibi), None
            return _softmax_attention(q, repeat_kv(k, heads), repeat_kv(v, heads), causal, key_padding_mask,
                                      scale, dropout, window, sequence_ids(cu_seqlens, q, k)), None
    segments = sequence_ids(cu_seqlens, q, k)
    k, v = repeat_kv(k, heads), repeat_kv(v, heads)
    masked = _masked(q.shape[2], k.shape[2], q.device, causal, key_padding_mask, mask, normalizer.sparse, window,
                     segments)
    if length_scale is not None:  # the keys a query sees: an additive mask's lowest values hide keys from softmax too
        hidden = masked if normalizer.sparse else _masked(q.shape[2], k.shape[2], q.device, causal, key_padding_mask,
                                                          mask, True, window, segments)
        seen = torch.full((1, q.shape[2]), k.shape[2], device=q.device) if hidden is None \
            else (~hidden.view((1,) * (4 - hidden.dim()) + hidden.shape)).sum(-1).amax(1)  # (B, Tq): heads alike
        q = q * length_scale(seen.clamp(min=1)).to(q.dtype)
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    if alibi is not None:
        scores = scores + alibi_bias(alibi, q.shape[2], k.shape[2], q.device)
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    if mask is not None and not mask.dtype == torch.bool:
        scores = scores + mask.float()
    if normalizer.learned:
        probs = normalizer(scores, -1, alpha=alpha.view(1, -1, 1, 1), alpha_min=alpha_min)
    else:
        probs = normalizer(scores, -1)
    weights = F.dropout(probs.to(v.dtype), p=dropout) if dropout > 0 else probs.to(v.dtype)
    return torch.matmul(weights, v), probs


def _masked(q_len, k_len, device, causal, key_padding_mask, mask, sparse, window=None, segments=None):
    """True where a score is masked (-inf), broadcastable to the scores (B, H, Tq, Tk), or None
    where nothing is."""
    parts = []
    if segments is not None:
        parts.append(segments[:, None, :, None] != segments[:, None, None, :])
    if causal:
        parts.append(~visible(q_len, k_len, device, window=window))
    if key_padding_mask is not None:
        parts.append(key_padding_mask[:, None, None, :])
    if mask is not None:
        if mask.dtype == torch.bool:
            parts.append(~mask)
        elif sparse:  # masked exactly: a query that sees no key gets zeros, not a uniform row
            parts.append(mask <= torch.finfo(mask.dtype).min)
    return functools.reduce(torch.logical_or, parts) if parts else None


def fused_masks(mask, causal, key_padding_mask, batch, q_len, k_len, window=None, cu_seqlens=None):
    """(causal, key_padding_mask, window, cu_seqlens) that give exactly what ``mask``,
    ``causal``, ``key_padding_mask`` and ``cu_seqlens`` mask together, as the fused kernels take
    them, or None where ``mask`` is something else (a window other than ``window``, a bias).
    Reading a mask compares it whole, which waits for the device once per call."""
    if mask is None:
        return causal, key_padding_mask, (window if causal else None), cu_seqlens
    if cu_seqlens is not None:  # a mask beside packed sequences is left to the explicit path
        return None
    if mask.dtype == torch.bool:
        masked = ~mask[:, 0]
    else:
        masked = mask[:, 0] <= torch.finfo(mask.dtype).min  # the dtype's lowest, or -inf
        if not bool(((mask[:, 0] == 0) | masked).all()):
            return None  # an additive bias, not a mask
    masked = masked.expand(batch, q_len, k_len)  # a mask shared by the batch or the queries, too
    if key_padding_mask is not None:
        masked = masked | key_padding_mask[:, None, :]
    if window is not None:
        # Causal within the window: a key is padding where every query whose window holds it masks it.
        outside = ~visible(q_len, k_len, masked.device, window=window)
        padding = (masked | outside).all(1)
        if torch.equal(masked, padding[:, None, :] | outside):
            return True, (padding if bool(padding.any()) else None), window, None
    padding = masked[:, -1, :]  # the last query sees every key that is not padding
    expected = padding[:, None, :].expand(-1, q_len, -1)
    if causal or bool((masked & ~expected).any()):  # a query sees fewer keys than the last: causal, if anything
        causal, expected = True, expected | ~visible(q_len, k_len, masked.device)
    if not torch.equal(masked, expected):
        return _packed(masked, window)
    return causal, (padding if bool(padding.any()) else None), None, None


def _packed(masked, window):
    """(causal, None, window, cu_seqlens) where ``masked`` (1, T, T) is packed sequences, each
    query seeing its own sequence's keys (all of them, or causally, within ``window`` where
    that is named), else None.  A sequence starts where a query's first visible key is itself."""
    if masked.shape[0] != 1 or masked.shape[1] != masked.shape[2]:
        return None
    seen = ~masked[0]
    T = seen.shape[0]
    if not bool(seen.any(1).all()):  # a query that sees nothing: padding, not packing
        return None
    positions = torch.arange(T, device=seen.device)
    starts = seen.to(torch.uint8).argmax(1) == positions
    segments = starts.cumsum(0)
    same = segments[:, None] == segments[None, :]
    for causal, shape in ((False, same), (True, same & visible(T, T, seen.device, window=window))):
        if torch.equal(seen, shape):
            cu_seqlens = torch.cat([positions[starts], positions.new_tensor([T])])
            return causal, None, (window if causal else None), cu_seqlens
    return None


def _softmax_attention(q, k, v, causal, key_padding_mask, scale, dropout=0.0, window=None, segments=None):
    """Softmax attention by PyTorch's SDPA (flash or memory-efficient kernels on CUDA).
    A query row with no visible key gives zeros, as the entmax kernel does (SDPA gives NaN)."""
    mask = None
    if key_padding_mask is not None:
        mask = ~key_padding_mask[:, None, None, :]
    if segments is not None:
        same = segments[:, None, :, None] == segments[:, None, None, :]
        mask = same if mask is None else mask & same
    # SDPA's own causal mask is aligned at the start, and has no window.
    if causal and (mask is not None or q.size(2) != k.size(2) or window is not None):
        seen = visible(q.size(2), k.size(2), q.device, window=window)
        mask, causal = (seen if mask is None else mask & seen), False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, dropout_p=dropout)
    if mask is not None:
        out = out.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return out
