"""How many PyTorch ops one attention call dispatches, forward and backward, per path.

A training step of a small transformer can be paced by the host rather than the GPU:
then what an attention module costs is the ops it dispatches and the kernels it
launches, not their arithmetic.  This counts both on CPU, no GPU needed: every aten op
dispatched during one self-attention call and its backward pass (a ``TorchDispatchMode``),
for fairseq's own ``MultiheadAttention`` and for ``AlphaEntmaxAttention`` through SDPA
and through the fused entmax kernel, the Triton kernels replaced by stubs that allocate
their outputs and count their launches (so the count is the fused path's host work
around them, as on CUDA).

    python benchmarks/count_attention_ops.py [--length 45] [--batch 96] [--embed-dim 512] [--heads 4]
"""

import argparse
from unittest import mock

import torch
from fairseq.modules import MultiheadAttention
from torch.utils._python_dispatch import TorchDispatchMode

from fairseq_sparse.entmax import attention as fused_attention
from fairseq_sparse.entmax import attention_kernel
from fairseq_sparse.modules.alpha_entmax_attention import AlphaEntmaxAttention


class CountOps(TorchDispatchMode):
    """Counts the aten ops dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def stub_kernels(launches):
    """Stand-ins for attention_kernel.forward and .backward with their outputs' shapes, each
    adding its Triton launches (1 forward; 3 backward: r, dk and dv, dq) to `launches`."""
    def forward(q, k, v, alpha_heads, fixed, causal, key_padding_mask, scale, alpha_stats, backward=True):
        launches[0] += 1
        B, H, Tq, _ = q.shape
        og = torch.empty_like(q) if backward else None
        return torch.empty_like(q), og, torch.zeros((B * H, attention_kernel.NUM_STATS, Tq), device=q.device)

    def backward(q, k, v, do, og, stats, alpha_heads, fixed, causal, key_padding_mask, scale, alpha_grad):
        launches[0] += 3
        do.contiguous()
        dalpha = torch.empty((q.shape[0] * q.shape[1], q.shape[2]), device=q.device) if alpha_grad else None
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dalpha

    return forward, backward


def count(module, x, causal, key_padding_mask):
    """(aten ops, Triton launches) of one forward and backward pass of `module` on `x`."""
    launches = [0]
    forward, backward = stub_kernels(launches)
    future = torch.triu(torch.full((x.size(0), x.size(0)), float("-inf")), 1) if causal else None
    with mock.patch.object(attention_kernel, "forward", forward), \
            mock.patch.object(attention_kernel, "backward", backward), \
            mock.patch.object(fused_attention, "_use_fused", lambda q: True):
        module.train()
        with CountOps() as ops:
            out, _ = module(x, x, x, key_padding_mask=None if causal else key_padding_mask, attn_mask=future,
                            need_weights=False)
            out.sum().backward()
    return ops.count, launches[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=45, help="tokens per sentence")
    parser.add_argument("--batch", type=int, default=96, help="sentences")
    parser.add_argument("--embed-dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.length, args.batch, args.embed_dim, requires_grad=True)
    key_padding_mask = torch.zeros(args.batch, args.length, dtype=torch.bool)
    key_padding_mask[: args.batch // 2, :3] = True
    E, H = args.embed_dim, args.heads

    def ours(normalizer):
        return AlphaEntmaxAttention(E, H, self_attention=True, normalizer=normalizer, causal_attn_mask=True)

    modules = {
        "fairseq MultiheadAttention": lambda: MultiheadAttention(E, H, self_attention=True),
        "ours, softmax through SDPA": lambda: ours("softmax"),
        "ours, 1.5-entmax, fused": lambda: ours("entmax15"),
        "ours, alpha-entmax per head, fused": lambda: ours("alpha_entmax"),
    }
    print(f"self-attention, {args.batch} sentences of {args.length} tokens, {H} heads of {E // H}; "
          "one forward and backward pass\n")
    print("| attention | aten ops, padding mask | aten ops, causal | Triton launches |")
    print("| --- | --- | --- | --- |")
    for name, make in modules.items():
        padded, launches = count(make(), x, False, key_padding_mask)
        causal, _ = count(make(), x, True, key_padding_mask)
        print(f"| {name} | {padded} | {causal} | {launches} |")


if __name__ == "__main__":
    main()
