"""Where the fused entmax attention's time goes: forward against backward, solver variants, tile shapes.

In one run on one GPU this times the forward kernel alone (as in training: og and the
row statistics written) and forward+backward of the fused attention (``attend``), next to SDPA's
forward and forward+backward, for variants of the kernel:

- the package's kernel at alpha = 1.5;
- a learnable alpha per head (1.25 to 1.75) with the Newton tolerance of float32,
  float16 (the package's for half-precision inputs) or bfloat16 (``KernelConfig.tolerance``,
  a runtime argument, no new compile);
- with ``--tile-sweep``, tile shapes (query rows x keys, warps, pipeline stages;
  ``KernelConfig.tiles``) at the package's solver.

It prints the forward's passes over the key tiles per query tile (the kernel counts
them) and the largest difference of the output, dq and (per head) d alpha from the
first variant of the same alpha, so that a faster variant that is wrong shows.  Each
of ``--repeats`` rounds times every variant once (``timing.py``): a time is the median
of the rounds, a ratio to SDPA the median of the rounds' ratios (forward+backward's
with its quartiles).

    python benchmarks/bench_attention_kernel.py --tokens 16384 --lengths 1024 4096
    python benchmarks/bench_attention_kernel.py --tokens 16384 --lengths 1024 --tile-sweep
    python benchmarks/bench_attention_kernel.py --tokens 4096 --lengths 64 --heads 4 --head-dim 128 \
        --tile-sweep --shapes default 64,32,8,3 32,32,4,3     # the training benchmark's heads

Without CUDA the kernels run under Triton's interpreter at a small shape (a check of
this script, not a timing).
"""

import argparse
import dataclasses
import functools
import os
import statistics

import torch

CUDA = torch.cuda.is_available()
if not CUDA:  # before the kernels are defined
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch.nn.functional as F  # noqa: E402

from attention_inputs import entmax_attend  # noqa: E402
from fairseq_sparse.entmax import kernels, use_backend  # noqa: E402
from fairseq_sparse.entmax.kernels import PACKAGE, KernelConfig, fixed_kind  # noqa: E402
from fairseq_sparse.entmax.kernels.config import DIAG_PASSES, blocks  # noqa: E402
from fairseq_sparse.entmax.reference import newton_tol  # noqa: E402
from timing import describe, interleaved_ms, paired_ratio  # noqa: E402

# (BLOCK_M, BLOCK_N, warps, stages); None: the package's default for the device.
# (64, 32, 8) and (32, 32, 4) spill least at head dim 128 (benchmarks/kernel_ptx.py --only D128).
SHAPES_GPU = [None, (64, 64, 4, 2), (64, 64, 4, 4), (128, 64, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3),
              (128, 32, 4, 3), (32, 64, 4, 3), (128, 128, 8, 3), (64, 32, 8, 3), (32, 32, 4, 3)]
SHAPES_CPU = [None, (32, 16, 1, None)]


def label(shape):
    return "default" if shape is None else "{}x{} w{} s{}".format(*(x if x is not None else "-" for x in shape))


def shape_setting(text):
    """``default`` or BLOCK_M,BLOCK_N,WARPS,STAGES, as --shapes takes them."""
    if text == "default":
        return None
    try:
        block_m, block_n, warps, stages = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shapes takes 'default' or BLOCK_M,BLOCK_N,WARPS,STAGES "
                                         f"(e.g. 64,32,8,3); got {text!r}") from None
    return block_m, block_n, warps, stages


def variants(head_alpha, tile_sweep, shapes=None):
    """(alpha label, alpha, variant label, KernelConfig); the first of each alpha is the
    reference of the others.  ``shapes``: the tile sweep's, if not all."""
    if tile_sweep:
        shapes = shapes or (SHAPES_GPU if CUDA else SHAPES_CPU)
        for name, alpha in (("1.5", 1.5), ("per head", head_alpha)):
            for tiles in shapes:
                yield name, alpha, label(tiles), KernelConfig(tiles=tiles)
        return
    yield "1.5", 1.5, "package", PACKAGE
    # The tolerances of float32, float16 (the package's for half-precision inputs:
    # kernels.config.tolerance) and bfloat16.
    for tol_dtype in (torch.float32, torch.float16, torch.bfloat16):
        tol = newton_tol(tol_dtype)
        name = f"{str(tol_dtype)[6:]} tol {tol:.1e}"
        yield "per head", head_alpha, name, KernelConfig(tolerance=tol)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per batch: the batch is TOKENS / T")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--sharpness", type=float, default=1.0,
                        help="q ~ N(0, SHARPNESS^2), k ~ N(0, 1): the scores' spread (trained attention is sharper)")
    parser.add_argument("--repeats", type=int, default=10, help="rounds, each timing every variant once")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--tile-sweep", action="store_true", help="tile shapes instead of solver variants")
    parser.add_argument("--shapes", type=shape_setting, nargs="+", metavar="M,N,W,S",
                        help="with --tile-sweep, these shapes ('default': the package's) instead of all of them")
    args = parser.parse_args()
    device, dtype = ("cuda", getattr(torch, args.dtype)) if CUDA else ("cpu", torch.float32)
    lengths, tokens = (args.lengths, args.tokens) if CUDA else ([40], 40)
    heads = args.heads if CUDA else 2
    print(f"{torch.cuda.get_device_name() if CUDA else 'CPU, Triton interpreter (not a timing)'}, "
          f"torch {torch.__version__}, {dtype}; H={heads} head_dim={args.head_dim}; "
          f"{'causal' if args.causal else 'not causal'}; q ~ N(0, {args.sharpness:g}^2); {args.repeats} rounds "
          f"(ms: medians; /SDPA: medians of the rounds' ratios)",
          flush=True)
    scale = args.head_dim ** -0.5
    for T in lengths:
        torch.manual_seed(0)
        shape = (max(1, tokens // T), heads, T, args.head_dim)
        q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
        q = (q * args.sharpness).to(dtype)
        for t in (q, k, v):
            t.requires_grad_()
        up = torch.randn(shape, device=device, dtype=dtype)
        head_alpha = torch.linspace(1.25, 1.75, heads, device=device).requires_grad_()

        def fwd_bwd(attention):
            def run():
                for t in (q, k, v, head_alpha):
                    t.grad = None
                with use_backend("triton"):  # on CPU too: the kernels under the interpreter
                    attention().backward(up)
            return run

        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)  # noqa: E731

        def sdpa_forward():
            with torch.no_grad():
                sdpa()

        timed = {"sdpa fwd": sdpa_forward, "sdpa all": fwd_bwd(sdpa)}
        rows, references = [], {}
        for name, alpha, variant, config in variants(head_alpha, args.tile_sweep, args.shapes):
            per_head = torch.is_tensor(alpha)
            alpha_heads = alpha.detach().float() if per_head else torch.full((heads,), alpha, device=device)
            call = kernels.Call(fixed=fixed_kind(alpha), scale=scale, causal=args.causal, config=config)
            forward = functools.partial(kernels.forward, q.detach(), k.detach(), v.detach(), alpha_heads, call,
                                        alpha_stats=per_head)
            attention = functools.partial(entmax_attend, q, k, v, alpha, causal=args.causal, kernel=config)
            try:  # each variant once, untimed: it compiles, counts its passes and gives its gradients
                counted = kernels.forward(q.detach(), k.detach(), v.detach(), alpha_heads,
                                          dataclasses.replace(call, config=dataclasses.replace(config,
                                                                                               diagnostics=True)),
                                          alpha_stats=per_head)
                o = forward().o
                rows_per_tile = blocks(args.head_dim, device, config)[0]
                passes = counted.diagnostics[:, DIAG_PASSES, ::rows_per_tile].mean().item()
                fwd_bwd(attention)()
                grads = (q.grad.detach().clone(), head_alpha.grad.detach().clone() if per_head else None)
            except Exception as e:  # e.g. a tile shape over the shared memory: say so and go on
                rows.append((name, variant, describe(e, 90)))
                continue
            ref = references.setdefault(name, (o, *grads))
            diff_o = (o.float() - ref[0].float()).abs().max().item()
            diff_dq = (grads[0].float() - ref[1].float()).abs().max().item()
            diff_da = f"{((grads[1] - ref[2]).abs().max() / ref[2].abs().max()).item():10.1e}" if per_head else ""
            rows.append((name, variant, f"{passes:6.2f} {diff_o:7.1e} {diff_dq:7.1e} {diff_da}"))
            timed[(name, variant, "fwd")] = forward
            timed[(name, variant, "all")] = fwd_bwd(attention)
            if CUDA:
                torch.cuda.empty_cache()
        times = interleaved_ms(timed, args.repeats)
        sdpa_fwd, sdpa_all = times["sdpa fwd"], times["sdpa all"]
        print(f"\nT={T}, batch {shape[0]}: SDPA forward {statistics.median(sdpa_fwd):.3f} ms, "
              f"forward+backward {statistics.median(sdpa_all):.3f} ms")
        print(f"  {'alpha':8s} {'variant':24s} {'fwd ms':>7s} {'/SDPA':>7s} {'fwd+bwd':>8s} {'/SDPA':>6s} "
              f"{'(quartiles)':>11s} {'bwd ms':>6s} {'passes':>6s} {'|do|':>7s} {'|ddq|':>7s} {'|dda|/|da|':>10s}")
        for name, variant, checks in rows:
            fwd, total = times.get((name, variant, "fwd")), times.get((name, variant, "all"))
            for failed in (fwd, total):
                if isinstance(failed, Exception):
                    checks = describe(failed, 90)
            if not (isinstance(fwd, list) and isinstance(total, list)):
                print(f"  {name:8s} {variant:24s} {checks}", flush=True)
                continue
            fwd_ratio, all_ratio = paired_ratio(fwd, sdpa_fwd)[0], paired_ratio(total, sdpa_all)
            fwd_ms, total_ms = statistics.median(fwd), statistics.median(total)
            print(f"  {name:8s} {variant:24s} {fwd_ms:7.3f} {fwd_ratio:6.2f}x {total_ms:8.3f} {all_ratio[0]:5.2f}x "
                  f"{f'({all_ratio[1]:.2f}-{all_ratio[2]:.2f})':>11s} {total_ms - fwd_ms:6.3f} {checks}", flush=True)


if __name__ == "__main__":
    main()
