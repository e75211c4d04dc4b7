"""Passes over the key tiles that the fused entmax attention's forward kernel makes.

The forward kernel (``fairseq_sparse/entmax/attention_kernel.py``) recomputes every
key tile's scores from q and k on each pass: one for the row maxima, one per Newton
step on the threshold, one on the support for alpha = 2 and 1.5 (unless the Newton
passes certified the exact threshold themselves), and one for the output.  Each pass
costs a Q K^T over all key tiles, so on a GPU their number bounds the forward time.
The kernel records, for each query tile, how many it made; this prints their mean and
maximum over the query tiles for sparsemax, 1.5-entmax and alpha-entmax with one alpha
per head (1.25 to 1.75), with four solvers in the same run (``KernelConfig``): plain
(Newton from 0, then the threshold on the support), certified (``certify``), the
package's, certified and starting from the threshold of each row's largest tile maxima
(``tile_start``), and from several scores kept per
key tile (``--kept R,K``: R per tile in K slots per row, with the bound on the scores
left out that lets a row skip Newton altogether); then the last solver's passes over
the plain solver's, and the largest difference between the plain solver's output and
any other's.

The count depends on the scores and the tile shape, not on the device: without CUDA
the kernel runs under Triton's interpreter on CPU tensors, at the GPU's tiles (64 query
rows by 64 keys) unless told otherwise.

    python benchmarks/bench_attention_passes.py                      # T in 256 512 1024, N(0, 1) scores
    python benchmarks/bench_attention_passes.py --lengths 1024 --sharpness 3 --causal
    python benchmarks/bench_attention_passes.py --lengths 1024 --kept 2,16
"""

import argparse
import dataclasses
import os

import torch

if not torch.cuda.is_available():  # before the kernels are defined
    os.environ.setdefault("TRITON_INTERPRET", "1")

from fairseq_sparse.entmax import attention_kernel  # noqa: E402
from fairseq_sparse.entmax.triton_kernel import fixed_kind  # noqa: E402
from kernel_variants import CERTIFIED_FROM_ZERO, KEPT_CANDIDATE, PLAIN_SOLVER  # noqa: E402


def passes(q, k, v, alpha, causal, solver, tiles):
    """(mean passes per query tile, max, output) of one forward with the KernelConfig
    ``solver`` at ``tiles`` (BLOCK_M, BLOCK_N) and 4 warps."""
    heads = alpha if torch.is_tensor(alpha) else torch.full((q.shape[1],), alpha, device=q.device)
    config = dataclasses.replace(solver, tiles=(*tiles, 4, None))
    o, _, stats, _ = attention_kernel.forward(q, k, v, heads.float(), fixed_kind(alpha), causal, None,
                                           q.shape[-1] ** -0.5, alpha_stats=torch.is_tensor(alpha), config=config)
    per_tile = stats[:, attention_kernel.STAT_PASSES, ::tiles[0]]
    return per_tile.mean().item(), per_tile.max().item(), o


def kept_setting(text):
    """argparse type of --kept: "R,K" as KernelConfig(kept=(R, K)) takes it, checked by
    KernelConfig itself (R scores kept per key tile, K slots per row)."""
    try:
        kept = tuple(int(x) for x in text.split(","))
        attention_kernel.KernelConfig(kept=kept)
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(f"{text}: {e}")
    return kept


def solvers(kept):
    return {"plain": PLAIN_SOLVER, "certified": CERTIFIED_FROM_ZERO, "+ tile start": attention_kernel.PACKAGE,
            "kept {},{}".format(*kept): attention_kernel.KernelConfig(kept=kept)}


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
    parser.add_argument("--kept", type=kept_setting, default="{},{}".format(*KEPT_CANDIDATE),
                        metavar="R,K", help="the last solver keeps each key tile's R largest scores in K slots per "
                                            "row (default: kernel_variants.KEPT_CANDIDATE, %(default)s)")
    args = parser.parse_args()
    settings = solvers(args.kept)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"{torch.cuda.get_device_name() if device == 'cuda' else 'CPU, Triton interpreter'}; float32, "
          f"B={args.batch} H={args.heads} head_dim={args.head_dim}, q ~ N(0, {args.sharpness:g}^2), k ~ N(0, 1); "
          f"{'causal' if args.causal else 'not causal'}; tiles {args.tiles[0]} x {args.tiles[1]}")
    print(f"{'T':>6s}  {'normaliser':24s} " + " ".join(f"{name:>14s}" for name in settings)
          + f" {'ratio':>6s}  {'max |o_plain - o|':>17s}")
    for T in args.lengths:
        gen = torch.Generator().manual_seed(T)
        shape = (args.batch, args.heads, T, args.head_dim)
        q = (torch.randn(shape, generator=gen) * args.sharpness).to(device)
        k, v = (torch.randn(shape, generator=gen).to(device) for _ in range(2))
        for name, alpha in (("sparsemax", 2.0), ("1.5-entmax", 1.5),
                            ("alpha-entmax per head", torch.linspace(1.25, 1.75, args.heads, device=device))):
            counts = [passes(q, k, v, alpha, args.causal, solver, tuple(args.tiles)) for solver in settings.values()]
            (plain, _, o_plain), (last, _, _) = counts[0], counts[-1]
            difference = max((o_plain - o).abs().max().item() for _, _, o in counts[1:])
            print(f"{T:6d}  {name:24s} " + " ".join(f"{mean:8.2f} ({most:3.0f})" for mean, most, _ in counts)
                  + f" {last / plain:6.2f}  {difference:17.2e}", flush=True)


if __name__ == "__main__":
    main()
