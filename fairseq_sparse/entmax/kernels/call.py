"""What one fused attention call fixes for its forward and its backward kernels (``Call``),
and the host-side arguments the kernels read from it."""

import dataclasses
from typing import NamedTuple, Optional

import torch

from .config import GENERIC, PACKAGE, WINDOWED, KernelConfig


class Packing(NamedTuple):
    """Packed sequences as the kernels read them, made once a call by :func:`packing`: each
    position's sequence (1, T) int32, and that sequence's first position and one past its last."""
    seg: torch.Tensor
    first: torch.Tensor
    end: torch.Tensor


def packing(cu_seqlens, ids):
    """The :class:`Packing` of sequences ``cu_seqlens`` (S + 1,) whose positions' ids (1, T) are
    ``ids`` (``masks.sequence_ids``, which checks them)."""
    cu = cu_seqlens.to(ids.device, torch.long)
    return Packing(ids.to(torch.int32).contiguous(), cu[ids], cu[ids + 1])


@dataclasses.dataclass(frozen=True, eq=False)
class Call:
    """One call of the fused kernels, the same for its forward and its backward.

    - ``fixed``: the closed form that finishes the threshold (``config.fixed_kind``).
    - ``scale``: of the scores, q.k scale.
    - ``causal``: query i sees keys j <= i + Tk - Tq; with ``window``, only the ``window``
      keys up to that one (a sliding window; the key tiles before a query tile's windows
      are never visited).
    - ``packed``: a :class:`Packing` (B = 1, Tq = Tk): a query sees only its own sequence's
      keys, and the key tiles outside its sequences are never visited.
    - ``key_padding_mask``: (B, Tk) int8, nonzero at padding, or None.
    - ``slopes``: ALiBi, float32 (H,), ``-slopes[h] |i + Tk - Tq - j|`` added to head h's
      scores, or None (no bias).
    - ``dropout``: attention dropout's probability, its pattern drawn from ``seed``.
    - ``config``: how the kernels are laid out (:class:`~.config.KernelConfig`).
    """
    fixed: int = GENERIC
    scale: float = 1.0
    causal: bool = False
    window: Optional[int] = None
    packed: Optional[Packing] = None
    key_padding_mask: Optional[torch.Tensor] = None
    slopes: Optional[torch.Tensor] = None
    dropout: float = 0.0
    seed: int = 0
    config: KernelConfig = PACKAGE


class Forward(NamedTuple):
    """What the forward kernel leaves (``forward_pass.forward``)."""
    o: torch.Tensor
    og: Optional[torch.Tensor]
    stats: torch.Tensor
    blocks: torch.Tensor
    diagnostics: Optional[torch.Tensor]


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


def padding_arg(key_padding_mask, q):
    """The mask (B, Tk) int8, or a placeholder the kernels never read (HAS_KPM false)."""
    return key_padding_mask if key_padding_mask is not None else q.new_zeros((q.shape[0], 1), dtype=torch.int8)


def packing_args(packed, block, q):
    """(SEG, BOUNDS) for the kernels: the positions' sequences, and for each tile of ``block``
    positions the first position of its first position's sequence and one past the last of
    its last one's, (1, tiles, 2) int32; without packing, q in their stead (never read)."""
    if packed is None:
        return q, q
    T = packed.seg.shape[1]
    starts = torch.arange(0, T, block, device=q.device)
    ends = (starts + block).clamp(max=T) - 1
    return packed.seg, torch.stack([packed.first[:, starts], packed.end[:, ends]], -1).to(torch.int32).contiguous()


def slopes_arg(slopes, alpha_heads):
    """The ALiBi slopes (H,) float32 as the kernels read them: zeros (no bias) for None."""
    if slopes is None:
        return torch.zeros_like(alpha_heads)
    return slopes.to(alpha_heads.device, torch.float32).contiguous()


def causal_kind(call):
    """The kernels' CAUSAL: 0, 1 (causal) or WINDOWED (causal within a sliding window; a
    window comes with causal, ``masks.check_window``)."""
    return WINDOWED if call.window is not None else int(bool(call.causal))
