"""Training tokens/s of transformers with softmax, 1.5-entmax and alpha-entmax attention, on a GPU.

One training step is the forward pass, label-smoothed cross-entropy, the backward pass
and an Adam update, under bf16 autocast, on synthetic batches shaped like a
translation corpus (source and target lengths drawn around --length, source padded on
the left as fairseq does, --tokens target tokens per batch).  Models are
``transformer_iwslt_de_en`` sized (6 + 6 layers, 512 wide, 4 heads; --arch): fairseq's
stock ``transformer`` (softmax through ``F.multi_head_attention_forward``) and our
``entmax_transformer`` with each normaliser, on the fused attention path
(``entmax_attention``; SDPA for softmax) and on the explicit one (scores stored,
Triton row-wise normaliser).  Every figure is a ratio to the stock transformer in the
same run.

    python benchmarks/bench_training_gpu.py [--length 30] [--tokens 4096] [--steps 30]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from fairseq import options, tasks

import fairseq_sparse

REPO = Path(__file__).resolve().parents[1]
DEVICE = "cuda"
VARIANTS = [  # name, arch, normaliser, fused path
    ("stock transformer (softmax)", "transformer_iwslt_de_en", None, False),
    ("softmax, fused (SDPA)", "entmax_transformer_iwslt_de_en", "softmax", True),
    ("1.5-entmax, fused", "entmax_transformer_iwslt_de_en", "entmax15", True),
    ("1.5-entmax, explicit", "entmax_transformer_iwslt_de_en", "entmax15", False),
    ("alpha-entmax, fused", "entmax_transformer_iwslt_de_en", "alpha_entmax", True),
    ("alpha-entmax, explicit", "entmax_transformer_iwslt_de_en", "alpha_entmax", False),
]


def build(data, arch, normalizer, vocab):
    parser = options.get_training_parser()
    extra = ["--attention-normalizer", normalizer] if normalizer else []
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", str(REPO / "fairseq_sparse"), "--task",
                                                "translation", "-s", "de", "-t", "en", "--arch", arch, *extra])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task.build_model(args)


def batches(n, tokens, length, vocab, pad, eos, generator):
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
        out.append(tuple(t.to(DEVICE) for t in (src, src_len, prev, tgt)))
    return out


def measure(model, data, steps, warmup, pad):
    model.to(DEVICE).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    times = []
    for i, (src, src_len, prev, tgt) in enumerate(data[:warmup + steps]):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            logits = model(src, src_len, prev)[0]
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1), ignore_index=pad,
                               label_smoothing=0.1, reduction="sum")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - start, int((tgt != pad).sum())))
    seconds = sum(t for t, _ in times)
    return sum(n for _, n in times) / seconds, torch.cuda.max_memory_allocated()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=30, help="mean sentence length in tokens")
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per batch (about)")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2, help="measure each variant this many times, interleaved")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA device")
    fairseq_sparse.load_plugin()
    with tempfile.TemporaryDirectory() as tmp:
        for lang in ("de", "en"):
            Path(tmp, f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(args.vocab - 4)))
        models = {name: build(tmp, arch, norm, args.vocab) for name, arch, norm, _ in VARIANTS}
    for (name, _, _, fused), model in zip(VARIANTS, models.values()):
        for module in model.modules():
            if hasattr(module, "use_fused_kernel"):
                module.use_fused_kernel = fused
    dictionary = next(iter(models.values())).decoder.dictionary
    pad, eos = dictionary.pad(), dictionary.eos()
    data = batches(args.warmup + args.steps, args.tokens, args.length, len(dictionary), pad, eos,
                   torch.Generator().manual_seed(0))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; bf16 autocast; "
          f"{sum(p.numel() for p in models[VARIANTS[0][0]].parameters()) / 1e6:.1f}M parameters; "
          f"~{args.tokens} target tokens per batch, sentences of {args.length // 2}-{3 * args.length // 2} tokens; "
          f"{args.steps} timed steps after {args.warmup}, best of {args.repeats}", file=sys.stderr)
    results = {name: [] for name in models}
    for _ in range(args.repeats):  # interleaved, so that clock drift hits every variant alike
        for name, model in models.items():
            torch.cuda.reset_peak_memory_stats()
            results[name].append(measure(model, data, args.steps, args.warmup, pad))
            model.cpu()
            torch.cuda.empty_cache()
    base = max(r[0] for r in results[VARIANTS[0][0]])
    print(f"| model | target tokens/s | / stock softmax | peak memory |")
    print("| --- | --- | --- | --- |")
    for name, runs in results.items():
        tps = max(r[0] for r in runs)
        mem = statistics.median(r[1] for r in runs)
        print(f"| {name} | {tps:,.0f} | {tps / base:.2f} | {mem / 2**30:.2f} GiB |")


if __name__ == "__main__":
    main()
