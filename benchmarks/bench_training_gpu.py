"""Training tokens/s of transformers with softmax, 1.5-entmax and alpha-entmax attention, on a GPU.

One training step is the forward pass, label-smoothed cross-entropy, the backward pass
and an Adam update, under bf16 autocast, on synthetic batches shaped like a
translation corpus (source and target lengths drawn around --length, source padded on
the left as fairseq does, --tokens target tokens per batch).  Models are
``transformer_iwslt_de_en`` sized (6 + 6 layers, 512 wide, 4 heads; --arch): fairseq's
stock ``transformer`` (softmax through ``F.multi_head_attention_forward``) and our
``entmax_transformer`` with each normaliser, on the fused attention path
(the Triton kernels; SDPA for softmax) and on the explicit one (scores stored,
Triton row-wise normaliser).  Every figure is a ratio to the stock transformer in the
same run, taken round by round: all the models stay on the GPU, every round gives each
of them one step on the same batch, in a rotating order (``timing.interleaved_ms``), and
a ratio is the median over the rounds of stock step time / the model's, per target
token, with its quartiles (timing one model's steps after another's would let the host's
drift fall on some models and not others).  Peak memory is measured first, one model at a
time on the GPU.

    python benchmarks/bench_training_gpu.py [--length 30] [--tokens 4096] [--steps 30] [--profile 5]

``--profile N`` then runs N more steps of each model under ``torch.profiler`` and says
where a step's time goes: the GPU's busy time per step (its kernels, copies and fills)
against the step's time in the rounds, the kernel launches per step, and the ops that
take the most host time in the stock model and in the alpha-entmax one; and, for one
attention call (forward and backward) at the batch's shape, the host's time per call
(until the calls return) against the whole (until the GPU is done), for SDPA, the fused
kernel and the explicit path.  A step whose GPU is busy for a small part of it is paced
by the host (Python, dispatch, launches), and a faster kernel cannot speed it up; fewer
or cheaper launches can.  (Counted on CPU with the Triton kernels stubbed, one fused
call dispatches about as many PyTorch ops as fairseq's own attention, forward and
backward, plus 4 Triton launches; the explicit path 2.)

A seventh row times the fused alpha-entmax transformer with ``KernelConfig(one_tile=False)``:
each forward pass recomputes its scores from q and k, as before keys that fit one tile (up to
64 here: every batch) were scored once; its ratio to the fused row is that change's worth.

``--tiles M,N,W`` adds one more model, the alpha-entmax transformer on the fused path
with every kernel at BLOCK_M x BLOCK_N tiles and W warps.  At the model's head dim, 128,
the package's tiles (64 x 32, 4 warps) spill registers in every kernel, and 8 warps
spill none in the forward and dk/dv (``kernel_ptx.py``); this times whether that
matters to a training step.

``--device cpu`` with ``--model-args`` for a small model runs the same code on CPU
tensors, to check the script (the tests do); its times say nothing.
"""

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from fairseq import options, tasks

import fairseq_sparse
from fairseq_sparse import markdown
from fairseq_sparse.entmax.kernels import KernelConfig
from fairseq_sparse.modules import AlphaEntmaxAttention

from kernel_variants import SCORES_RECOMPUTED  # this script's folder is on sys.path
from timing import interleaved_ms, paired_ratio, tiles_setting

REPO = Path(__file__).resolve().parents[1]
VARIANTS = [  # name, arch, normaliser, fused path
    ("stock transformer (softmax)", "transformer_iwslt_de_en", None, False),
    ("softmax, fused (SDPA)", "entmax_transformer_iwslt_de_en", "softmax", True),
    ("1.5-entmax, fused", "entmax_transformer_iwslt_de_en", "entmax15", True),
    ("1.5-entmax, explicit", "entmax_transformer_iwslt_de_en", "entmax15", False),
    ("alpha-entmax, fused", "entmax_transformer_iwslt_de_en", "alpha_entmax", True),
    ("alpha-entmax, explicit", "entmax_transformer_iwslt_de_en", "alpha_entmax", False),
]


def build(data, arch, normalizer, model_args):
    parser = options.get_training_parser()
    extra = ["--attention-normalizer", normalizer] if normalizer else []
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", str(REPO / "fairseq_sparse"), "--task",
                                                "translation", "-s", "de", "-t", "en", "--arch", arch, *extra,
                                                *model_args])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task.build_model(args)


def build_variants(model_args, vocab, variants=VARIANTS):
    """{name: model} for every variant of `variants` (VARIANTS' rows), in training mode, each
    attention module on the variant's path, over synthetic dictionaries of `vocab` words."""
    with tempfile.TemporaryDirectory() as tmp:
        for lang in ("de", "en"):
            Path(tmp, f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(vocab - 4)))
        models = {name: build(tmp, arch, norm, model_args) for name, arch, norm, _ in variants}
    for (name, _, _, fused), model in zip(variants, models.values()):
        model.train()
        for module in model.modules():
            if hasattr(module, "use_fused_kernel"):
                module.use_fused_kernel = fused
    return models


def batches(n, tokens, length, vocab, pad, eos, generator, device):
    """Synthetic translation batches: lengths uniform in [length/2, 3 length/2]."""
    out = []
    for _ in range(n):
        rows = max(1, tokens // length)
        src_len = torch.randint(length // 2, 3 * length // 2 + 1, (rows,), generator=generator)
        tgt_len = torch.randint(length // 2, 3 * length // 2 + 1, (rows,), generator=generator)
        src = torch.full((rows, int(src_len.max())), pad)
        tgt = torch.full((rows, int(tgt_len.max())), pad)
        prev = torch.full_like(tgt, pad)
        for i in range(rows):
            s, t = int(src_len[i]), int(tgt_len[i])
            src[i, src.size(1) - s:] = torch.randint(4, vocab, (s,), generator=generator)  # left-padded
            tgt[i, :t] = torch.randint(4, vocab, (t,), generator=generator)
            prev[i, 0] = eos
            prev[i, 1:t] = tgt[i, :t - 1]
        out.append(tuple(t.to(device) for t in (src, src_len, prev, tgt)))
    return out


def with_kernel(model, config):
    """``model`` with every attention module's fused kernels run as the KernelConfig ``config``."""
    for module in model.modules():
        if isinstance(module, AlphaEntmaxAttention):
            module.kernel_config = config
    return model


def trainer(model, data, pad, device):
    """A callable making one training step of `model` per call, on the next batch of `data`
    (cycled): forward under bf16 autocast, label-smoothed cross-entropy, backward, Adam."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    state = {"i": 0}

    def step():
        src, src_len, prev, tgt = data[state["i"] % len(data)]
        state["i"] += 1
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = model(src, src_len, prev)[0]
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1), ignore_index=pad,
                               label_smoothing=0.1, reduction="sum")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def peak_memory(model, data, pad, device):
    """Peak bytes allocated by one training step of `model`, alone on the GPU (None on CPU)."""
    if device != "cuda":
        return None
    model.to(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    step = trainer(model, data, pad, device)
    step()
    step()  # Adam's state exists from the first step on
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    model.cpu()
    del step
    torch.cuda.empty_cache()
    return peak


def profile(step, steps, device):
    """torch.profiler over `steps` calls of `step` (one untimed call first): the averaged
    events, the GPU's busy milliseconds per step (None on CPU) and kernel launches per step."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile as torch_profile

    cuda = device == "cuda"
    step()
    if cuda:
        torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    events = prof.events()
    # Device-side events (kernels, copies, fills) are events of their own, Triton's too,
    # whichever host code launched them; one stream, so their durations add up.
    busy = sum(e.time_range.elapsed_us() for e in events if e.device_type == DeviceType.CUDA) / 1000 / steps
    launches = sum("LaunchKernel" in e.name for e in events if e.device_type == DeviceType.CPU) / steps
    return prof.key_averages(), (busy if cuda else None), launches


def attention_call_us(device, batch, length, heads, head_dim, calls=50):
    """name -> (host, whole) microseconds per attention call, forward and backward, at one
    batch's shape (self-attention, no mask): `host` until the calls return, `whole` until the
    GPU is done with them.  Where the two agree, the host paces these calls."""
    import time

    from attention_inputs import entmax_attend
    from fairseq_sparse.entmax import entmax15, entmax_alpha

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v = (torch.randn(batch, heads, length, head_dim, device=device, dtype=dtype, requires_grad=True)
               for _ in range(3))
    alpha = torch.full((heads,), 1.3, device=device, requires_grad=True)
    do = torch.randn_like(q)
    scale = head_dim ** -0.5

    def explicit(normalize):  # scores stored, then the row-wise normaliser (Triton on CUDA)
        return lambda: normalize(torch.matmul(q, k.transpose(-1, -2)).float() * scale).to(dtype) @ v

    variants = {
        "SDPA": lambda: F.scaled_dot_product_attention(q, k, v),
        "1.5-entmax, fused": lambda: entmax_attend(q, k, v, 1.5),
        "1.5-entmax, explicit": explicit(lambda s: entmax15(s, dim=-1)),
        "alpha-entmax per head, fused": lambda: entmax_attend(q, k, v, alpha),
        "alpha-entmax per head, explicit": explicit(lambda s: entmax_alpha(s, alpha.view(1, -1, 1, 1), dim=-1)),
    }
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = {}
    for name, fn in variants.items():
        for _ in range(3):  # compiles, and sizes the allocator
            fn().backward(do)
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn().backward(do)
        host = time.perf_counter() - start
        sync()
        out[name] = (host / calls * 1e6, (time.perf_counter() - start) / calls * 1e6)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=30, help="mean sentence length in tokens")
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per batch (about)")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=30, help="timed rounds: each model makes one step per round")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps of each model first")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: check the script at a small --model-args; its times mean nothing")
    parser.add_argument("--model-args", default="",
                        help="fairseq options appended to every model's, e.g. \"--encoder-layers 1 ...\"")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="then N steps of each model under torch.profiler: GPU busy time and kernel launches "
                             "per step, and the ops that take the most host time")
    parser.add_argument("--tiles", type=tiles_setting, metavar="M,N,WARPS",
                        help="add the alpha-entmax transformer, fused, with every kernel at BLOCK_M x BLOCK_N tiles "
                             "and WARPS warps, e.g. 64,32,8")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.profile < 0:
        parser.error("--steps must be at least 1, --warmup and --profile at least 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA device (or --device cpu to check the script)")
    fairseq_sparse.load_plugin()
    model_args = shlex.split(args.model_args)
    fused_per_head = next(row[1:] for row in VARIANTS if row[0] == "alpha-entmax, fused")
    # The fused per-head model as it was before keys that fit one tile were scored once: every
    # forward pass recomputes its scores (and at head dim 128 over two tiles of 32 keys).
    recomputed = "alpha-entmax, fused, scores recomputed each pass"
    variants, kernels = list(VARIANTS) + [(recomputed, *fused_per_head)], {}
    kernels[recomputed] = SCORES_RECOMPUTED
    if args.tiles:
        name = "alpha-entmax, fused, {} x {} tiles, {} warps".format(*args.tiles)
        variants.append((name, *fused_per_head))
        kernels[name] = KernelConfig(tiles=tuple(args.tiles))  # Triton's default pipeline stages
    models = build_variants(model_args, args.vocab, variants)
    for name, config in kernels.items():
        with_kernel(models[name], config)
    dictionary = next(iter(models.values())).decoder.dictionary
    pad, eos = dictionary.pad(), dictionary.eos()
    data = batches(args.steps + args.warmup + 2, args.tokens, args.length, len(dictionary), pad, eos,
                   torch.Generator().manual_seed(0), args.device)
    tokens = [int((tgt != pad).sum()) for *_, tgt in data]
    stock = VARIANTS[0][0]
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU (a check of the script)"
    print(f"{device_name}, torch {torch.__version__}; bf16 autocast; "
          f"{sum(p.numel() for p in models[stock].parameters()) / 1e6:.1f}M parameters; "
          f"~{args.tokens} target tokens per batch, sentences of {args.length // 2}-{3 * args.length // 2} tokens; "
          f"{args.steps} rounds after {args.warmup} untimed steps each", file=sys.stderr)
    memory = {name: peak_memory(model, data, pad, args.device) for name, model in models.items()}
    steps = {}
    for name, model in models.items():
        model.to(args.device)
        steps[name] = trainer(model, data, pad, args.device)
        for _ in range(args.warmup):
            steps[name]()
    # interleaved_ms calls each step twice before its rounds (a first call, then one to size
    # its samples), so round r's batch is the same for every model.
    times = interleaved_ms(steps, args.steps, min_ms=0.0)
    first = args.warmup + 2
    per_token = {name: [ms / tokens[(first + r) % len(data)] for r, ms in enumerate(runs)]
                 for name, runs in times.items() if not isinstance(runs, Exception)}
    rows = []
    for name, runs in times.items():
        if isinstance(runs, Exception):
            rows.append([name, f"failed: {type(runs).__name__}: {str(runs).splitlines()[0][:80]}", "–", "–"])
            continue
        rate = 1000 / sorted(per_token[name])[len(per_token[name]) // 2]
        ratio, q1, q3 = paired_ratio(per_token[stock], per_token[name])
        mem = "–" if memory[name] is None else f"{memory[name] / 2**30:.2f} GiB"
        rows.append([name, f"{rate:,.0f}", f"{ratio:.2f} ({q1:.2f}-{q3:.2f})", mem])
    print(markdown.table(["model", "target tokens/s", "/ stock softmax: median (quartiles)", "peak memory"], rows))
    if args.profile:
        report_profile(steps, times, args.profile, args.device)
        report_attention_calls(models[stock].encoder.layers[0].self_attn, args)


def report_attention_calls(attention, args):
    """The table of ``attention_call_us`` at a batch's shape and `attention`'s heads."""
    heads, head_dim = attention.num_heads, attention.embed_dim // attention.num_heads
    rows, length = max(1, args.tokens // args.length), 3 * args.length // 2  # a batch, padded to its longest
    print(f"\nOne attention call, forward and backward, at a batch's shape ({rows} sentences of "
          f"{length} tokens, {heads} heads of {head_dim}; no mask): microseconds per call\n")
    print(markdown.table(["attention", "host (until the calls return)", "whole (until the GPU is done)"],
                         [[name, f"{host:,.0f}", f"{whole:,.0f}"] for name, (host, whole)
                          in attention_call_us(args.device, rows, length, heads, head_dim).items()]))


def report_profile(steps, times, n, device):
    """Where each model's step goes (``--profile``), and the top host ops of two of them."""
    print(f"\nProfiled, {n} steps of each model (torch.profiler; its own overhead slows the host, not the GPU):\n")
    tables, rows = {}, []
    for name, step in steps.items():
        if isinstance(times[name], Exception):
            continue
        averages, busy, launches = profile(step, n, device)
        ms = sorted(times[name])[len(times[name]) // 2]
        share = "–" if busy is None else f"{busy / ms:.0%}"
        rows.append([name, f"{ms:.1f}", "–" if busy is None else f"{busy:.1f}", share, f"{launches:.0f}"])
        tables[name] = averages
    print(markdown.table(["model", "step in the rounds, ms", "GPU busy, ms per step", "GPU busy / step",
                          "kernel launches per step"], rows))
    for name in (VARIANTS[0][0], "alpha-entmax, fused"):
        if name in tables:
            print(f"\n{name}: the ops with the most host time (self), over {n} steps")
            print(tables[name].table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))


if __name__ == "__main__":
    main()
