"""Timing for the attention benchmarks: variants timed in turn, ratios taken round by round.

Timing one variant after another (the median of its runs, then the next variant's) lets
the drift of a machine fall on some variants and not others (docs/notes/fused-attention.md
shows how far apart such runs fell). So every round here times each variant once, in a
rotating order, and a ratio of two variants is the median of their ratios within a round,
with its quartiles to show what is left of the noise. A sample is as many back-to-back
calls as last ``min_ms`` (queued, as in training), so that launch jitter does not dominate
a call shorter than a millisecond.
"""

import argparse
import math
import statistics
import time

import torch


def _sample_ms(fn, calls):
    """Milliseconds per call over `calls` back-to-back calls: CUDA events on a GPU, the
    wall clock otherwise (the benchmarks' CPU runs check the scripts, they time nothing)."""
    if torch.cuda.is_available():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / calls
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1000 * (time.perf_counter() - t0) / calls


def interleaved_ms(fns, repeats, min_ms=2.0):
    """name -> list of `repeats` milliseconds per call, for each callable of `fns` (a dict),
    or name -> the exception it raised (on its first call, which also compiles it, or in
    a later round: out of memory, say), after which it is left out of the rounds."""
    results, calls = {}, {}
    for name, fn in fns.items():
        try:
            fn()
            calls[name] = max(1, math.ceil(min_ms / max(_sample_ms(fn, 1), 1e-3)))
            results[name] = []
        except Exception as e:  # e.g. AdaSplash refusing a shape, a tile shape over the shared memory
            results[name] = e
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    names = list(calls)
    for r in range(repeats if names else 0):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if isinstance(results[name], Exception):
                continue
            try:
                results[name].append(_sample_ms(fns[name], calls[name]))
            except Exception as e:
                results[name] = e
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    return results


def paired_ratio(samples, baseline):
    """(median, lower quartile, upper quartile) of samples[r] / baseline[r] over the rounds."""
    ratios = sorted(a / b for a, b in zip(samples, baseline))
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return statistics.median(ratios), q1, q3


def describe(error, width=80):
    """One line for a variant that failed (interleaved_ms's exceptions)."""
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:width]}"


def tiles_setting(text):
    """An argparse type for the benchmarks' ``--tiles BLOCK_M,BLOCK_N,WARPS`` (kernel_ptx.py,
    bench_training_gpu.py): the attention kernels' tiles and warps, powers of two."""
    try:
        block_m, block_n, warps = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tiles takes BLOCK_M,BLOCK_N,WARPS, e.g. 64,32,8; got {text!r}") from None
    if not all(n > 0 and n & (n - 1) == 0 for n in (block_m, block_n, warps)) or min(block_m, block_n) < 16:
        raise argparse.ArgumentTypeError(f"--tiles {text}: powers of two, tiles of at least 16")
    return block_m, block_n, warps


def status_kib(field):
    """A field of /proc/self/status in KiB (VmRSS, VmHWM): the benchmarks' CPU memory (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")
