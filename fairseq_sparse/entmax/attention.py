"""The one attention entry point: ``normalise(scale Q K^T + masks) V`` for any registered
normaliser, deciding once between the fused kernels and the explicit path.

    out, probs = attend(q, k, v, get_normalizer("alpha_entmax"), alpha=head_alpha(),
                        options=AttentionOptions(causal=True))

Every attention of the package calls it: the fairseq module
(:class:`~fairseq_sparse.modules.AlphaEntmaxAttention`) and the Hugging Face attention
function (:mod:`fairseq_sparse.hf`) only reshape their framework's tensors and keep their
framework's state (incremental decoding, caches), as transformers' ``sdpa_attention_forward``
does.  A call goes one way down: the masks (:mod:`.masks`), then either the kernels
(:mod:`.kernels`) or the explicit path here, and nothing below calls back up.

- **Fused**, where the kernels run (CUDA, or CPU tensors under Triton's interpreter in
  ``use_backend("triton")``), no weights are asked for and the masks are a causal mask
  and/or key padding: the sparse normalisers through the Triton kernels (the (Tq, Tk)
  scores are never stored; attention dropout inside the kernels), softmax through
  PyTorch's SDPA.  An additive ``mask`` that is exactly key padding and/or causal (as
  transformers builds them), or causal within the sliding window the options name, or
  packed sequences (one batch row of sequences that see only themselves, causal or not),
  is read as such (:func:`.masks.read_mask`).
- **Explicit** everywhere else: the scores (float32, float64 for float64 inputs), the
  masks, the normaliser, dropout, the product with V, ``EXPLICIT_CHUNK`` queries at a time;
  the probabilities are returned when asked for.

Shapes: q (B, H, Tq, D), k and v (B, H_kv, Tk, D), H_kv dividing H (grouped-query
attention: query head h reads key/value head h // (H / H_kv); the fused kernels read them
without repeating them, the explicit path repeats them); query i sees keys j <= i + Tk - Tq
when causal (the last query aligned with the last key, as with cached keys), and with a
sliding window only the ``window`` keys up to that one.  A query that sees no key gets zeros
from the sparse normalisers, and from softmax on the fused path.
"""

import dataclasses
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from . import activations
from .activations import FLOAT32_ALPHA_MIN
from .masks import check_window, hidden, keys_seen, mask_rows, read_mask, sequence_ids, visible

try:
    from . import kernels
except ImportError:  # no Triton
    kernels = None

# Queries per chunk of the explicit path: bounds the scores held at once (while autograd
# keeps every chunk's probabilities for the backward pass).
EXPLICIT_CHUNK = 1024


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


@dataclasses.dataclass(frozen=True, eq=False)
class AttentionOptions:
    """How one attention call runs, beside its tensors; checked when made.

    - ``causal``: query i sees keys j <= i + Tk - Tq.  ``window``: with ``causal``, only the
      ``window`` keys up to that one (a sliding window); with an additive ``mask`` of
      :func:`attend`, the mask is read as causal within it where it is exactly that, and
      taken as it is otherwise, as transformers' sliding-window layers give both.
    - ``cu_seqlens``: packed sequences, (S + 1,) offsets into one batch row of as many queries
      as keys (FlashAttention's varlen form): a query sees only its own sequence's keys
      (causally within it with ``causal``), and the fused kernels never visit the key tiles
      of other sequences.
    - ``scale``: of the scores (None: 1 / sqrt(D)).  ``dropout``: the attention dropout
      probability to apply (0 outside training); the fused kernels draw its pattern from a
      seed taken from torch's generator and regenerate it in the backward.
    - ``length_scale``: a callable (a :class:`~.length_scale.LengthScale` bound to the layer
      input) from the keys each query sees, (B or 1, Tq), to the queries' factor,
      broadcastable to (B, H, Tq, 1): the queries are multiplied by it before the scores.
    - ``alibi``: (H,) ALiBi slopes (:mod:`~.positions`), ``-slope_h |i + Tk - Tq - j|`` added
      to the scores (a zero slope: no bias on that head), inside the fused kernels' tiles for
      the sparse normalisers; softmax with ALiBi takes the explicit path.
    - ``fused``: False keeps the explicit path (benchmarks compare the two); ``kernel``: the
      kernels' :class:`~.kernels.KernelConfig` (None: the package's).  Neither changes the
      result beyond rounding.
    """
    causal: bool = False
    window: Optional[int] = None
    cu_seqlens: Any = None
    scale: Optional[float] = None
    dropout: float = 0.0
    length_scale: Optional[Callable] = None
    alibi: Optional[torch.Tensor] = None
    fused: bool = True
    kernel: Any = None

    def __post_init__(self):
        object.__setattr__(self, "dropout", check_dropout(self.dropout))
        if self.scale is not None and not self.scale > 0:
            raise ValueError(f"attention: scale must be positive, got {self.scale}")


DEFAULT = AttentionOptions()


def attend(q, k, v, normalizer, alpha=None, alpha_min=None, options=DEFAULT, key_padding_mask=None, mask=None,
           need_weights=False):
    """(output (B, H, Tq, D), probabilities (B, H, Tq, Tk) from the explicit path where
    ``need_weights`` (which keeps the explicit path to have them), else None).

    ``normalizer``: a registry entry (:func:`~.normalizers.get_normalizer`); ``alpha``: its
    per-head alphas, shape (H,), for a learned one; ``alpha_min``: a lower bound they keep by
    construction (``HeadAlpha``'s), or None, where CPU alphas are read to check them.
    ``options``: an :class:`AttentionOptions`.  ``key_padding_mask``: (B, Tk) bool, True at
    padding.  ``mask``: any other mask, broadcastable to (B, H, Tq, Tk), bool (True: attend)
    or additive (a large negative value, the dtype's lowest, masks a key exactly under the
    sparse normalisers).
    """
    window = check_window(options.window, options.causal or mask is not None)
    length_scale, alibi = options.length_scale, options.alibi
    near_one = _check(q, k, v, normalizer, alpha, alpha_min, key_padding_mask, alibi)
    scale = q.shape[-1] ** -0.5 if options.scale is None else float(options.scale)
    if (options.fused and not need_weights and not near_one and (alibi is None or normalizer.sparse)
            and _fused_runs(q, v)):
        read = read_mask(mask, options.causal, key_padding_mask, q.shape[0], q.shape[2], k.shape[2], window,
                         options.cu_seqlens)
        if read is not None:
            causal, key_padding_mask, window, cu_seqlens = read
            if length_scale is not None:
                seen = keys_seen(q.shape[2], k.shape[2], q.device, causal, key_padding_mask, window, cu_seqlens)
                q = q * length_scale(seen).to(q.dtype)
            if normalizer.sparse:
                return _fused_entmax(q, k, v, alpha if normalizer.learned else normalizer.alpha, causal=causal,
                                     key_padding_mask=key_padding_mask, window=window, cu_seqlens=cu_seqlens,
                                     scale=scale, options=options), None
            return _softmax_attention(q, k, v, causal, key_padding_mask, scale, options.dropout, window,
                                      sequence_ids(cu_seqlens, q, k)), None
    return _explicit(q, k, v, normalizer, alpha, alpha_min, options, window, scale, key_padding_mask, mask,
                     need_weights)


def _check(q, k, v, normalizer, alpha, alpha_min, key_padding_mask, alibi):
    """Refuse bad arguments, naming them; True where a learned alpha may lie below
    FLOAT32_ALPHA_MIN (then the explicit path computes in float64 where it must).  A CUDA
    alpha's values are not read: that would wait for the device."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"attention takes q, k, v of shape (B, H, T, D), got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    B, H, _, D = q.shape
    if k.shape[0] != B or k.shape[1] < 1 or H % k.shape[1] or k.shape[3] != D or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"attention: k must be (B={B}, H_kv, Tk, D={D}) with H_kv dividing H={H} (query heads "
                         f"sharing key/value heads), and v (B, H_kv, Tk, any), got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if key_padding_mask is not None and (key_padding_mask.dtype != torch.bool
                                         or tuple(key_padding_mask.shape) != (B, k.shape[2])):
        raise ValueError(f"attention: key_padding_mask must be bool of shape (B={B}, Tk={k.shape[2]}), got "
                         f"{key_padding_mask.dtype} {tuple(key_padding_mask.shape)}")
    if alibi is not None and tuple(alibi.shape) != (H,):
        raise ValueError(f"attention: alibi takes one slope per query head, ({H},), got {tuple(alibi.shape)}")
    if not normalizer.learned:
        return False
    if alpha is None:
        raise ValueError(f"attention normaliser {normalizer.name!r}: learned, so it needs one alpha per head")
    if not torch.is_tensor(alpha) or tuple(alpha.shape) != (H,):
        raise ValueError(f"attention normaliser {normalizer.name!r}: alpha must be a tensor of one value per head, "
                         f"({H},), got {tuple(alpha.shape) if torch.is_tensor(alpha) else type(alpha).__name__}")
    if alpha_min is not None:
        return alpha_min < FLOAT32_ALPHA_MIN
    return not alpha.is_cuda and activations.check_alpha_range(alpha) < FLOAT32_ALPHA_MIN


def _fused_runs(q, v):
    """Whether the fused kernels run for queries like ``q``: Triton present, a CUDA tensor
    (unless ``use_backend("torch")``) or a CPU tensor under Triton's interpreter inside
    ``use_backend("triton")``, and heads no wider than the tiles take, v's as wide as q's."""
    if kernels is None or not kernels.supports(q) or not q.shape[-1] == v.shape[-1] <= kernels.MAX_HEAD_DIM:
        return False
    if q.is_cuda:
        return activations.current_backend() != "torch"
    return activations.current_backend() == "triton"  # CPU tensors: only under the interpreter, when asked


def _fused_entmax(q, k, v, alpha, *, causal, key_padding_mask, window, cu_seqlens, scale, options):
    """The Triton kernels' attention for a fixed alpha (a float) or one alpha per head."""
    learned = torch.is_tensor(alpha)
    heads = alpha if learned else torch.full((q.shape[1],), float(alpha), device=q.device)
    segments = sequence_ids(cu_seqlens, q, k)
    call = kernels.Call(
        fixed=kernels.GENERIC if learned else kernels.fixed_kind(float(alpha)), scale=scale, causal=causal,
        window=window, packed=None if segments is None else kernels.packing(torch.as_tensor(cu_seqlens), segments),
        key_padding_mask=None if key_padding_mask is None else key_padding_mask.contiguous().view(torch.int8),
        slopes=options.alibi, dropout=options.dropout,
        # The seed from torch's CPU generator: seeded by torch.manual_seed, and no wait for a GPU.
        seed=int(torch.randint(0, 2**31 - 1, ())) if options.dropout > 0 else 0,
        config=kernels.PACKAGE if options.kernel is None else options.kernel)
    return kernels.FusedEntmaxAttention.apply(q, k, v, heads, call)


def _explicit(q, k, v, normalizer, alpha, alpha_min, options, window, scale, key_padding_mask, mask, need_weights):
    """The attention with its scores materialised, EXPLICIT_CHUNK queries at a time."""
    length_scale, alibi = options.length_scale, options.alibi
    heads, (Tq, Tk) = q.shape[1], (q.shape[2], k.shape[2])
    segments = sequence_ids(options.cu_seqlens, q, k)
    k, v = repeat_kv(k, heads), repeat_kv(v, heads)
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    masks = dict(causal=options.causal, window=window, key_padding_mask=key_padding_mask, segments=segments,
                 mask=mask)
    chunks = [(start, min(start + EXPLICIT_CHUNK, Tq)) for start in range(0, Tq, EXPLICIT_CHUNK)]
    factor = None
    if length_scale is not None and chunks:  # from the keys each query sees (a mask's lowest values hide keys)
        seen = [_keys_left(hidden(Tq, Tk, q.device, rows=torch.arange(start, stop, device=q.device), **masks), Tk,
                           stop - start, q.device) for start, stop in chunks]
        factor = length_scale(torch.cat(seen, dim=1).clamp(min=1)).to(q.dtype)
    keys_t = k.to(compute).transpose(-1, -2)  # cast once, not once per chunk
    outputs, probabilities = [], []
    for start, stop in chunks:
        rows = torch.arange(start, stop, device=q.device)
        masked = hidden(Tq, Tk, q.device, sparse=normalizer.sparse, rows=rows, **masks)
        chunk = q[:, :, start:stop]
        if factor is not None:
            chunk = chunk * factor[..., start:stop, :]
        scores = torch.matmul(chunk.to(compute), keys_t) * scale
        if alibi is not None:  # positions.alibi_bias on these rows only, without the whole (Tq, Tk)
            distance = (rows[:, None] + (Tk - Tq) - torch.arange(Tk, device=q.device)[None, :]).abs()
            scores = scores - alibi.to(compute).view(1, -1, 1, 1) * distance.to(compute)
        if masked is not None:
            scores = scores.masked_fill(masked, float("-inf"))
        if mask is not None and mask.dtype != torch.bool:
            scores = scores + mask_rows(mask, Tq, rows).to(compute)
        if normalizer.learned:
            probs = normalizer(scores, -1, alpha=alpha.view(1, -1, 1, 1), alpha_min=alpha_min)
        else:
            probs = normalizer(scores, -1)
        weights = probs.to(v.dtype)
        if options.dropout > 0:
            weights = F.dropout(weights, p=options.dropout)
        outputs.append(torch.matmul(weights, v))
        if need_weights:
            probabilities.append(probs)
    out = torch.cat(outputs, dim=2) if outputs else q.new_zeros(q.shape[:3] + (v.shape[-1],))
    return out, (torch.cat(probabilities, dim=2) if probabilities else None) if need_weights else None


def _keys_left(masked, k_len, rows, device):
    """(B or 1, rows) how many keys each query sees under ``masked`` (heads alike)."""
    if masked is None:
        return torch.full((1, rows), k_len, dtype=torch.long, device=device)
    return (~masked.view((1,) * (4 - masked.dim()) + masked.shape)).sum(-1).amax(1)


def repeat_kv(states, heads):
    """(B, H_kv, T, D) -> (B, heads, T, D), each key/value head serving heads / H_kv query
    heads in turn (grouped-query attention, as transformers' ``repeat_kv``)."""
    B, H_kv, T, D = states.shape
    if H_kv == heads:
        return states
    return states[:, :, None].expand(B, H_kv, heads // H_kv, T, D).reshape(B, heads, T, D)


def _softmax_attention(q, k, v, causal, key_padding_mask, scale, dropout=0.0, window=None, segments=None):
    """Softmax attention by PyTorch's SDPA (flash or memory-efficient kernels on CUDA).
    A query row with no visible key gives zeros, as the entmax kernel does (SDPA gives NaN)."""
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
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
