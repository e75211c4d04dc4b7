"""The fused kernels as an autograd Function: forward and backward of one :class:`~.call.Call`."""

import torch
from torch.autograd import Function

from .backward_pass import backward
from .call import dense
from .forward_pass import forward


class FusedEntmaxAttention(Function):
    """``apply(q, k, v, alpha_heads, call)``: alpha-entmax attention of q (B, H, Tq, D) over k, v
    (B, H_kv, Tk, D), (B, H, Tq, D); ``alpha_heads`` (H,), float32 or not, may require grad;
    ``call`` a :class:`~.call.Call`, whose ``packed`` is made once for the forward and the
    backward.  Gradients in q, k, v and alpha_heads."""

    @staticmethod
    def forward(ctx, q, k, v, alpha_heads, call):
        q, k, v = (dense(t) for t in (q, k, v))  # no copy of a permuted projection
        heads = alpha_heads.detach().to(torch.float32).contiguous()
        # Inference (no input needs a gradient) skips og, the backward pass's statistic.
        out = forward(q, k, v, heads, call, alpha_stats=alpha_heads.requires_grad,
                      backward=any(ctx.needs_input_grad[:4]))
        ctx.save_for_backward(q, k, v, out.og, out.stats, out.blocks, heads)
        ctx.call, ctx.alpha_dtype = call, alpha_heads.dtype
        return out.o

    @staticmethod
    def backward(ctx, do):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "the fused attention kernels have no double backward (torch.autograd.grad(..., create_graph=True)): "
                "their gradients would have no history and a gradient penalty would be silently dropped; compute "
                "such a loss on the explicit path (attend(..., fused=False)), whose normalisers support it")
        q, k, v, og, stats, blocks, heads = ctx.saved_tensors
        alpha_grad = ctx.needs_input_grad[3]
        dq, dk, dv, dalpha_rows = backward(q, k, v, do, og, stats, blocks, heads, ctx.call, alpha_grad)
        dalpha = None
        if alpha_grad:
            B, H = q.shape[:2]
            dalpha = dalpha_rows.view(B, H, -1).sum(dim=(0, 2)).to(ctx.alpha_dtype)
        return dq, dk, dv, dalpha, None
