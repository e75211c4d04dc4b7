"""Passes over the key tiles that the fused entmax attention's forward kernel makes.

The forward kernel (``fairseq_sparse/entmax/kernels/forward_pass.py``) computes each key
tile's scores on every pass: one for the row maxima, one per Newton step on the
threshold, one on the support for alpha = 2 and 1.5 (unless the Newton passes certified
the exact threshold themselves), and one for the output.  Each pass costs a Q K^T over
the key tiles it visits, so on a GPU their number bounds the forward time.  The kernel
records, for each query tile, how many it made; this prints their mean and maximum over
the query tiles for sparsemax, 1.5-entmax and alpha-entmax with one alpha per head (1.25
to 1.75), against a plain solver counted in float64 on the same scores (Newton from 0
until every row's step is within float32's tolerance, ``reference.newton_steps``, then
the pass on the support and the output's), their ratio, and the largest difference
between the kernel's output and the float64 reference attention.

The count depends on the scores and the tile shape, not on the device: without CUDA
the kernel runs under Triton's interpreter on CPU tensors, at the GPU's tiles (64 query
rows by 64 keys) unless told otherwise.

    python benchmarks/bench_attention_passes.py                      # T in 256 512 1024, N(0, 1) scores
    python benchmarks/bench_attention_passes.py --lengths 1024 --sharpness 3 --causal
"""

import argparse
import os

import torch

if not torch.cuda.is_available():  # before the kernels are defined
    os.environ.setdefault("TRITON_INTERPRET", "1")

from attention_inputs import explicit_attend  # noqa: E402
from fairseq_sparse.entmax import kernels, reference  # noqa: E402
from fairseq_sparse.entmax.kernels import fixed_kind  # noqa: E402
from fairseq_sparse.entmax.kernels.config import DIAG_PASSES  # noqa: E402


def kernel_passes(q, k, v, heads, kind, causal, tiles):
    """(passes of each query tile (B * H, query tiles), output) of one forward at ``tiles``."""
    config = kernels.KernelConfig(tiles=(*tiles, 4, None), diagnostics=True)
    out = kernels.forward(q, k, v, heads, kernels.Call(fixed=kind, scale=q.shape[-1] ** -0.5, causal=causal,
                                                       config=config), alpha_stats=False)
    return out.diagnostics[:, DIAG_PASSES, ::tiles[0]].cpu(), out.o


def plain_passes(q, k, heads, causal, block_m):
    """Passes of each query tile (B * H, query tiles) for Newton from 0, counted in float64."""
    B, H, T, D = q.shape
    scores = (q.double() @ k.double().transpose(-1, -2)).cpu() * D ** -0.5
    if causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    alphas = heads.double().cpu().view(1, H, 1, 1)
    z = (alphas - 1) * (scores - scores.amax(-1, keepdim=True)) + 1
    steps = torch.stack([reference.newton_steps(z[:, h], float(alphas[0, h]), reference.newton_tol(torch.float32))
                         for h in range(H)], 1)  # (B, H, T)
    per_tile = torch.nn.functional.pad(steps, (0, -T % block_m)).view(B * H, -1, block_m).amax(-1)
    support = torch.tensor([float(a) in (1.5, 2.0) for a in heads.tolist()]).repeat(B).view(B * H, 1)
    return 1 + per_tile + support + 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--sharpness", type=float, default=1.0,
                        help="q is drawn from N(0, SHARPNESS^2): the scores' spread (1: N(0, 1) scores, as "
                             "bench_attention_gpu.py; trained attention is sharper)")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--tiles", type=int, nargs=2, default=[64, 64], metavar=("BLOCK_M", "BLOCK_N"))
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"{torch.cuda.get_device_name() if device == 'cuda' else 'CPU, Triton interpreter'}; float32, "
          f"B={args.batch} H={args.heads} head_dim={args.head_dim}, q ~ N(0, {args.sharpness:g}^2), k ~ N(0, 1); "
          f"{'causal' if args.causal else 'not causal'}; tiles {args.tiles[0]} x {args.tiles[1]}")
    print(f"{'T':>6s}  {'normaliser':24s} {'plain':>14s} {'package':>14s} {'ratio':>6s}  {'max |o_ref - o|':>15s}")
    for T in args.lengths:
        gen = torch.Generator().manual_seed(T)
        shape = (args.batch, args.heads, T, args.head_dim)
        q = (torch.randn(shape, generator=gen) * args.sharpness).to(device)
        k, v = (torch.randn(shape, generator=gen).to(device) for _ in range(2))
        for name, alpha in (("sparsemax", 2.0), ("1.5-entmax", 1.5),
                            ("alpha-entmax per head", torch.linspace(1.25, 1.75, args.heads))):
            heads = (alpha if torch.is_tensor(alpha) else torch.full((args.heads,), alpha)).float().to(device)
            counted, o = kernel_passes(q, k, v, heads, fixed_kind(alpha), args.causal, tuple(args.tiles))
            plain = plain_passes(q, k, heads, args.causal, args.tiles[0]).float()
            o_ref = explicit_attend(q.double().cpu(), k.double().cpu(), v.double().cpu(),
                                    alpha if not torch.is_tensor(alpha) else alpha.double(), causal=args.causal)
            difference = (o.cpu().double() - o_ref).abs().max().item()
            print(f"{T:6d}  {name:24s} " + " ".join(f"{c.mean():8.2f} ({c.max():3.0f})" for c in (plain, counted))
                  + f" {counted.mean() / plain.mean():6.2f}  {difference:15.2e}", flush=True)


if __name__ == "__main__":
    main()
