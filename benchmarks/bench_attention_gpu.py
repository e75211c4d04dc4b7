"""Attention forward+backward on a CUDA GPU: sparse normalisers vs PyTorch's SDPA.

One attention layer's core, softmax(Q K^T / sqrt(d)) V, and the same with the
softmax replaced by our Triton sparsemax, 1.5-entmax and alpha-entmax with a
learnable alpha per head (its gradient included).  Every time is a ratio to
``F.scaled_dot_product_attention`` measured in the same run (fused flash
attention, the fastest softmax attention PyTorch has), and also to the same
unfused pipeline with ``torch.softmax``, which isolates the normaliser's cost:
an entmax needs the whole row before its threshold is known, so it cannot be
fused into a flash-style online loop as softmax is, and pays for materialising
the (B, H, T, T) scores like the unfused softmax does.  The pure-PyTorch
reference path and the authors' ``entmax`` package (``entmax_bisect``) are
timed for comparison.  Peak memory is the extra memory one forward+backward
allocates, as a ratio to SDPA's.

Our fused kernel (``fairseq_sparse.entmax.attend`` on its fused path: the scores are
recomputed tile by tile, never stored) is timed at alpha = 1.5 (the passes over the keys
it makes: ``bench_attention_passes.py``) and with a learnable
alpha per head, and AdaSplash (deep-spin/adasplash, ``adasplash(q, k, v, alpha=1.5)``)
where it is installed and applies (alpha = 1.5, power-of-two lengths).  With
``--tokens N`` the batch is N / T sequences, so every length does the same number
of query rows; ``--causal`` masks the future (SDPA's ``is_causal``).  Each of
``--repeats`` rounds times every variant once (``timing.py``), and a ratio is the median
of the rounds' ratios, printed with its quartiles, as is our kernel's time over
AdaSplash's.

    python benchmarks/bench_attention_gpu.py                  # T in 256 512 1024 2048, bf16
    python benchmarks/bench_attention_gpu.py --dtype float32 --lengths 512
    python benchmarks/bench_attention_gpu.py --tokens 16384 --lengths 512 1024 4096 16384 --causal --no-reference
    python benchmarks/bench_attention_gpu.py --inputs structured --block-density 0.3 --lengths 1024 4096 16384

``--inputs structured`` draws q and k with the structure of trained attention (a local band,
a few global keys, a diffuse rest: ``attention_inputs.py``), its noise
found on one head of up to 2,048 positions for ``--block-density``, its band and global keys
those ``--fit CAPTURE`` reads off a capture; the block density our kernel then finds at each
length is printed.  ``--inputs captured --captured CAPTURE`` times a capture's q, k and v
themselves (benchmarks/capture_attention.py; one sequence, its modules as the batch), at
its own length.

``--device cpu`` runs every step on CPU tensors, the kernels under Triton's interpreter:
the times and memory mean nothing there, but the step is the GPU's, so the tests run it.
"""

import argparse
import math
import os
import statistics

import entmax as reference_package
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():  # before the kernels are defined: --device cpu runs them interpreted
    os.environ.setdefault("TRITON_INTERPRET", "1")

import attention_inputs
from attention_inputs import entmax_attend
from fairseq_sparse.entmax import entmax15, entmax_alpha, has_triton_kernel, sparsemax, support_size, use_backend
from timing import describe, interleaved_ms, paired_ratio

DEVICE = "cuda"  # --device sets it

try:
    from adasplash import adasplash
except ImportError:
    adasplash = None


def unfused(normalize, causal):
    def attention(q, k, v):
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        if causal:
            T = scores.shape[-1]
            future = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        return torch.matmul(normalize(scores), v)
    return attention


def softmax_in_float32(s):
    return torch.softmax(s.float(), -1).to(s.dtype)


def variants(heads, causal, lengths_pow2):
    # Spread over (1, 2) as learned alphas are (Correia et al. 2019, Fig. 2).
    alpha = torch.linspace(1.25, 1.75, heads, device=DEVICE).view(1, heads, 1, 1).requires_grad_()
    head_alpha = torch.linspace(1.25, 1.75, heads, device=DEVICE).requires_grad_()
    fns = {
        "SDPA (fused softmax)": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "unfused softmax": unfused(softmax_in_float32, causal),
        "sparsemax (triton)": unfused(sparsemax, causal),
        "entmax15 (triton)": unfused(entmax15, causal),
        "alpha-entmax per head (triton)": unfused(lambda s: entmax_alpha(s, alpha), causal),
        "fused entmax15 (ours)": lambda q, k, v: entmax_attend(q, k, v, 1.5, causal=causal),
        "fused alpha-entmax per head (ours)": lambda q, k, v: entmax_attend(q, k, v, head_alpha, causal=causal),
        "alpha-entmax per head (torch ref)": ("torch", unfused(lambda s: entmax_alpha(s, alpha), causal)),
        "entmax package entmax_bisect": unfused(
            lambda s: reference_package.entmax_bisect(s.float(), alpha, dim=-1).to(s.dtype), causal),
    }
    if adasplash is not None and lengths_pow2:
        fns["AdaSplash entmax15"] = lambda q, k, v: adasplash(q, k, v, alpha=1.5, is_causal=causal)
    return (alpha, head_alpha), fns


def peak_extra_bytes(fn):
    """The extra memory one call of ``fn`` allocates at its peak (None on CPU, which keeps no count)."""
    if DEVICE != "cuda":
        fn()
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8, help="sequences per batch (unless --tokens)")
    parser.add_argument("--tokens", type=int, help="tokens per batch: the batch is TOKENS / T sequences")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--causal", action="store_true", help="mask the future (decoder self-attention)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--repeats", type=int, default=20, help="rounds, each timing every variant once")
    parser.add_argument("--no-reference", action="store_true", help="skip the torch reference and entmax package")
    parser.add_argument("--no-unfused-entmax", action="store_true",
                        help="skip the unfused Triton normalisers (they hold the (T, T) scores)")
    parser.add_argument("--inputs", default="gaussian", choices=["gaussian", "structured", "captured"],
                        help="q, k, v ~ N(0, 1), with trained attention's structure, or captured from a trained "
                             "model (default: %(default)s)")
    parser.add_argument("--block-density", type=float, default=0.3,
                        help="with --inputs structured: the share of 64 x 64 tile pairs holding support to aim at")
    parser.add_argument("--fit", help="with --inputs structured: the capture whose band width and global keys they "
                                      "take (attention_inputs.fit)")
    parser.add_argument("--captured", help="with --inputs captured: the capture (benchmarks/capture_attention.py)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: the kernels under Triton's interpreter, to test the step (no timing)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if not has_triton_kernel() or (DEVICE == "cuda" and not torch.cuda.is_available()):
        raise SystemExit("this benchmark needs Triton, and a CUDA device unless --device cpu")
    if (args.inputs == "captured") != (args.captured is not None):
        parser.error("--inputs captured takes --captured CAPTURE, and --captured needs --inputs captured")
    dtype = getattr(torch, args.dtype) if DEVICE == "cuda" else torch.float32
    shape_of_band = (16.0, 2)
    if args.fit:
        fitted = attention_inputs.fit(attention_inputs.captured(args.fit))
        shape_of_band = (fitted.width, fitted.global_keys)
    layers = attention_inputs.captured(args.captured) if args.captured else None
    if layers and any(layer.cu_seqlens is not None for layer in layers):
        raise SystemExit(f"{args.captured}: packed sentences; bench_attention_tiles.py counts them, this times one "
                         "sequence (capture with --model and without --packed)")
    lengths = [layers[0].q.shape[2]] if layers else args.lengths
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU, Triton interpreter (not a timing)"
    print(f"{name}, torch {torch.__version__}, {str(dtype)[6:]}; H={args.heads} "
          f"head_dim={args.head_dim}; {'causal' if args.causal else 'not causal'}; "
          f"forward+backward of attention(Q, K, V); AdaSplash {'installed' if adasplash else 'not installed'}")

    for T in lengths:
        batch = max(1, args.tokens // T) if args.tokens else args.batch
        torch.manual_seed(0)
        if layers:  # the modules as the batch; their own heads and head dim
            drawn = [torch.cat([getattr(layer, part) for layer in layers]) for part in "qkv"]
            batch, args.heads, _, args.head_dim = drawn[0].shape
        shape = (batch, args.heads, T, args.head_dim)
        if layers:
            q, k, v = (t.to(DEVICE, dtype).requires_grad_() for t in drawn)
            print(f"T={T}: captured inputs, {len(layers)} modules of {args.captured}")
        elif args.inputs == "structured":
            width, global_keys = shape_of_band
            noise = attention_inputs.structured(1, 1, min(T, 2048), args.head_dim, args.block_density,
                                                causal=args.causal, seed=T, width=width, global_keys=global_keys)[4]
            drawn = attention_inputs.banded(batch, args.heads, T, args.head_dim, width, global_keys=global_keys,
                                            noise=noise, seed=T)
            q, k, v = (t.to(DEVICE, dtype).requires_grad_() for t in drawn)
            with torch.no_grad():
                from fairseq_sparse.entmax import kernels
                call = kernels.Call(fixed=kernels.ENTMAX15, scale=args.head_dim ** -0.5, causal=args.causal)
                blocks = kernels.forward(q.detach(), k.detach(), v.detach(), torch.full((args.heads,), 1.5, device=DEVICE),
                                         call, alpha_stats=False, backward=False).blocks
                reach = blocks.shape[1] * blocks.shape[2]  # not causal: every pair is in reach
                if args.causal:
                    reach = sum(min(blocks.shape[2], (m + 1) * blocks.shape[2] // blocks.shape[1])
                                for m in range(blocks.shape[1]))
            print(f"T={T}: structured inputs, noise {noise:.3f}, block density (1.5-entmax, our kernel's tiles) "
                  f"{float(torch.isfinite(blocks).sum()) / (reach * blocks.shape[0]):.2f}")
        else:
            q, k, v = (torch.randn(shape, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(3))
        up = torch.randn(shape, device=DEVICE, dtype=dtype)
        alphas, fns = variants(args.heads, args.causal, T & (T - 1) == 0)

        def step(attention, backend="auto"):
            if DEVICE == "cpu" and backend == "auto":
                backend = "triton"  # CPU tensors reach the kernels only when asked
            def run():
                with use_backend(backend):
                    for t in (q, k, v, *alphas):
                        t.grad = None
                    attention(q, k, v).backward(up)
            return run

        steps = {}
        for name, fn in fns.items():
            backend, fn = fn if isinstance(fn, tuple) else ("auto", fn)
            if args.no_reference and (backend == "torch" or "package" in name):
                continue
            if args.no_unfused_entmax and "(triton)" in name:
                continue
            steps[name] = step(fn, backend)
        times = interleaved_ms(steps, args.repeats)
        results = {}
        for name, ms in times.items():
            if isinstance(ms, torch.cuda.OutOfMemoryError):
                results[name] = None
            elif isinstance(ms, Exception):  # e.g. AdaSplash refusing a shape: say so and go on
                results[name] = describe(ms)
            else:
                results[name] = (ms, peak_extra_bytes(steps[name]))
            torch.cuda.empty_cache()
        sdpa_ms, sdpa_mem = results["SDPA (fused softmax)"]
        unfused_ms = results["unfused softmax"][0] if isinstance(results.get("unfused softmax"), tuple) else None
        density = {}
        if T <= 4096:  # the support, from explicit scores (one batch entry)
            with torch.no_grad():
                s = torch.matmul(q[:1], k[:1].transpose(-1, -2)) / math.sqrt(args.head_dim)
                if args.causal:
                    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=DEVICE).triu(1), float("-inf"))
                visible = torch.isfinite(s).sum(-1).float()
                for name, p in (("sparsemax (triton)", sparsemax(s)), ("entmax15 (triton)", entmax15(s)),
                                ("alpha-entmax per head (triton)", entmax_alpha(s, alphas[0][:1]))):
                    density[name] = (support_size(p).float() / visible).mean().item()
                for name in fns:  # every fused 1.5-entmax, whichever its solver, has the same support
                    if name.startswith("fused entmax15") or name == "AdaSplash entmax15":
                        density[name] = density["entmax15 (triton)"]
                density["fused alpha-entmax per head (ours)"] = density["alpha-entmax per head (triton)"]
        memory = "-" if sdpa_mem is None else f"{sdpa_mem / 2**20:.0f} MiB"
        print(f"\nT={T}, batch {batch}: SDPA {statistics.median(sdpa_ms):.3f} ms, {memory} peak")
        print(f"  {'':36s} {'time/SDPA':>10s} {'(quartiles)':>13s} {'time/unfused softmax':>21s} "
              f"{'memory/SDPA':>12s}  support")
        for name, result in results.items():
            if not isinstance(result, tuple):
                print(f"  {name:36s} {'out of memory' if result is None else result}", flush=True)
                continue
            ms, mem = result
            ratio, q1, q3 = paired_ratio(ms, sdpa_ms)
            support = f"{density[name]:6.1%}" if name in density else ""
            vs_unfused = f"{paired_ratio(ms, unfused_ms)[0]:20.2f}x" if unfused_ms else f"{'-':>21s}"
            memory = f"{'-':>11s} " if mem is None else f"{mem / sdpa_mem:11.2f}x"
            print(f"  {name:36s} {ratio:9.2f}x {f'({q1:.2f}-{q3:.2f})':>13s} {vs_unfused} {memory}  "
                  f"{support}", flush=True)
        ours, theirs = (results.get(name) for name in ("fused entmax15 (ours)", "AdaSplash entmax15"))
        if isinstance(ours, tuple) and isinstance(theirs, tuple):
            ratio, q1, q3 = paired_ratio(ours[0], theirs[0])
            print(f"  fused entmax15 (ours) / AdaSplash entmax15: {ratio:.2f}x (quartiles {q1:.2f}-{q3:.2f}) "
                  f"over {len(ours[0])} rounds", flush=True)


if __name__ == "__main__":
    main()
