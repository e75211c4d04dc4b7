"""Forward+backward time and peak memory of the sparse normalisers, as ratios to softmax.

Inputs are attention-shaped scores (B, H, T, T) with standard normal entries (a
hard case: the supports are wider than in trained attention).  The upstream
gradient is drawn once, outside the timed region.  Every ratio is against
``torch.softmax`` timed in the same run; the authors' ``entmax`` package is timed
alongside (``entmax_bisect`` with a learnable per-head alpha, its sort-based
``entmax15`` and ``sparsemax``).

    python benchmarks/bench_entmax.py                 # T in 64 128 512 1024
    python benchmarks/bench_entmax.py --lengths 512 --memory
"""

import argparse
import multiprocessing as mp
import statistics
import time

import entmax as reference_package
import torch

from fairseq_sparse.entmax import entmax15, entmax_alpha, has_cpp_kernel, sparsemax, support_size
from timing import status_kib


def per_head_alpha(heads):
    # Spread over (1, 2) as learned alphas are (Correia et al. 2019, Fig. 2).
    return torch.linspace(1.25, 1.75, heads).view(1, heads, 1, 1).requires_grad_()


def normalizers(heads, include_reference):
    alpha = per_head_alpha(heads)
    fns = {
        "softmax": lambda x: torch.softmax(x, -1),
        "sparsemax": sparsemax,
        "entmax15": entmax15,
        "entmax_alpha(per-head, +grad alpha)": lambda x: entmax_alpha(x, alpha),
        "entmax_alpha(1.1, +grad alpha)": lambda x: entmax_alpha(x, torch.full((1, heads, 1, 1), 1.1, requires_grad=True)),
    }
    if include_reference:
        fns.update({
            "ref sparsemax": lambda x: reference_package.sparsemax(x, dim=-1),
            "ref entmax15": lambda x: reference_package.entmax15(x, dim=-1),
            "ref entmax_bisect(per-head, +grad alpha)": lambda x: reference_package.entmax_bisect(x, alpha, dim=-1),
        })
    return fns


def time_fwd_bwd(fn, x, up, budget_s=1.5, max_repeats=10):
    """Median seconds of forward+backward, repeating within a time budget."""
    fn(x).backward(up)  # warm-up
    times = []
    while len(times) < max_repeats and sum(times) < budget_s:
        x.grad = None
        start = time.perf_counter()
        fn(x).backward(up)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _peak_child(name, shape, heads, queue):
    torch.manual_seed(0)
    x = torch.randn(shape, requires_grad=True)
    up = torch.randn(shape)
    fn = normalizers(heads, include_reference=True)[name]
    fn(x[:1]).backward(up[:1])  # load kernels and lazy state before measuring
    x.grad = None
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak-RSS mark (VmHWM) to the current RSS
    before = status_kib("VmRSS")
    fn(x).backward(up)
    queue.put((status_kib("VmHWM") - before) * 1024)


def peak_extra_bytes(name, shape, heads):
    """Peak resident memory added by one forward+backward (output, saved tensors,
    gradient), measured in a fresh process (Linux)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_child, args=(name, shape, heads, queue))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(f"memory measurement of {name} failed (exit code {proc.exitcode})")
    return queue.get()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 512, 1024])
    parser.add_argument("--no-reference", action="store_true", help="skip the (slow) entmax package")
    parser.add_argument("--memory", action="store_true", help="also measure peak memory at each length")
    args = parser.parse_args()

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, C++ kernel: {has_cpp_kernel()}")
    print(f"inputs (B={args.batch}, H={args.heads}, T, T) ~ N(0, 1), forward+backward; ratio = time / softmax time")
    for T in args.lengths:
        torch.manual_seed(0)
        shape = (args.batch, args.heads, T, T)
        x = torch.randn(shape, requires_grad=True)
        up = torch.randn(shape)
        fns = normalizers(args.heads, include_reference=not args.no_reference)
        base = time_fwd_bwd(fns["softmax"], x, up)
        line = f"\nT={T}: softmax {base * 1e3:.2f} ms"
        if args.memory:
            base_memory = peak_extra_bytes("softmax", shape, args.heads)
            line += f", {base_memory / 2**20:.1f} MiB peak"
        print(line)
        for name, fn in fns.items():
            if name == "softmax":
                continue
            ratio = time_fwd_bwd(fn, x, up) / base
            with torch.no_grad():
                density = support_size(fn(x.detach())).float().mean().item() / T
            line = f"  {name:42s} {ratio:8.2f}x softmax   (mean support {density:6.1%} of keys)"
            if args.memory:
                line += f"   peak memory {peak_extra_bytes(name, shape, args.heads) / base_memory:5.2f}x softmax"
            print(line, flush=True)


if __name__ == "__main__":
    main()
