"""How many PyTorch ops one attention call dispatches, forward and backward, per path.

A training step of a small transformer can be paced by the host rather than the GPU:
then what an attention module costs is the ops it dispatches and the kernels it
launches, not their arithmetic.  This counts both on CPU, no GPU needed: every aten op
dispatched during one self-attention call and its backward pass (a ``TorchDispatchMode``),
for fairseq's own ``MultiheadAttention`` and for ``AlphaEntmaxAttention`` through SDPA
and through the fused entmax kernel, the Triton kernels replaced by stubs that allocate
their outputs and count their launches (so the count is the fused path's host work
around them, as on CUDA).  The explicit path (scores stored, then the row-wise
normaliser: the C++ kernel here, Triton's on CUDA) gets rows too; its op count is the
CPU path's.

It also counts the *read-backs*: ops that copy a tensor's value to the host
(``aten::_local_scalar_dense``, ``is_nonzero``, ``item``).  On a GPU each waits for the
device to finish everything queued, so that the host cannot run ahead of it.  Per
attention call, and over the forward and backward pass of one training step of a small
model (``--step``: 2 + 2 layers, fairseq's stock ``transformer`` against our
``entmax_transformer`` per normaliser and path; the optimiser is left out, as Adam's
step counter lives on the host on CUDA).

``--step-host N`` times the host's work in a training step (forward, loss, backward),
per model, the Triton kernels stubbed: bench_training_gpu.py's models at their depth (6 +
6 layers, 4 heads) but 64 wide, on 16 sentences of 4 tokens, so that the arithmetic is
next to nothing and what is timed is Python, dispatch and autograd, the host's share of a
GPU step (the stubs leave out the Triton launches themselves, and the CUDA launches that a
GPU adds to every op).  N rounds, each timing every model once in a rotating order
(``timing.interleaved_ms``); a ratio to the stock transformer is the median of the rounds'
ratios, with its quartiles.  A model whose GPU steps were paced by the host alone would
train at the inverse of its ratio.

    python benchmarks/count_attention_ops.py [--length 45] [--batch 96] [--embed-dim 512] [--heads 4] [--step]
    python benchmarks/count_attention_ops.py --step-host 15    # the tables above, then the host's time
"""

import argparse
import contextlib
import functools
from unittest import mock

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch.utils._python_dispatch import TorchDispatchMode

from fairseq_sparse import markdown
from fairseq_sparse.entmax import attention, kernels
from fairseq_sparse.entmax.kernels import config, function
from fairseq_sparse.modules.alpha_entmax_attention import AlphaEntmaxAttention

# This script's folder is on sys.path, run as a script or imported by the tests.
import bench_training_gpu as bench  # noqa: E402
from timing import interleaved_ms, paired_ratio  # noqa: E402


# Ops that copy a tensor's value to the host: on a GPU, each waits for the device.
READ_BACKS = ("aten::_local_scalar_dense", "aten::is_nonzero", "aten::item")


class CountOps(TorchDispatchMode):
    """Counts the aten ops dispatched inside it, and the read-backs among them."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.read_backs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        self.read_backs += func._schema.name in READ_BACKS
        return func(*args, **(kwargs or {}))


def stub_kernels(launches):
    """Stand-ins for the kernels' forward and backward launches with their outputs' shapes, each
    adding its Triton launches (1 forward; 3 backward: r, dk and dv, dq) to `launches`."""
    def forward(q, k, v, alpha_heads, call, alpha_stats, backward=True):
        launches[0] += 1
        B, H, Tq, _ = q.shape
        og = torch.empty_like(q) if backward else None
        blocks = torch.zeros((B * H, 1, 1), device=q.device)
        stats = torch.zeros((B * H, config.NUM_STATS, Tq), device=q.device)
        return kernels.Forward(torch.empty_like(q), og, stats, blocks, None)

    def backward(q, k, v, do, og, stats, block_mask, alpha_heads, call, alpha_grad):
        launches[0] += 3
        dalpha = torch.empty((q.shape[0] * q.shape[1], q.shape[2]), device=q.device) if alpha_grad else None
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dalpha

    return forward, backward


@contextlib.contextmanager
def stubbed():
    """Within it, the fused kernels are the stubs (their launches counted, in the list it
    gives) and the fused path is taken wherever a module would take it on CUDA."""
    launches = [0]
    forward, backward = stub_kernels(launches)
    with mock.patch.object(function, "forward", forward), mock.patch.object(function, "backward", backward), \
            mock.patch.object(attention, "_fused_runs", lambda q, v: True):
        yield launches


def count(module, x, causal, key_padding_mask):
    """(aten ops, read-backs, Triton launches) of one forward and backward pass of `module` on `x`."""
    future = torch.triu(torch.full((x.size(0), x.size(0)), float("-inf")), 1) if causal else None
    with stubbed() as launches:
        module.train()
        with CountOps() as ops:
            out, _ = module(x, x, x, key_padding_mask=None if causal else key_padding_mask, attn_mask=future,
                            need_weights=False)
            out.sum().backward()
    return ops.count, ops.read_backs, launches[0]


def training_pass(model, batch, pad):
    """The forward pass, label-smoothed loss and backward pass of a training step of
    bench_training_gpu.py's `model` on `batch` (the optimiser left out: see above)."""
    src, src_len, prev, tgt = batch
    logits = model(src, src_len, prev)[0]
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1), ignore_index=pad, label_smoothing=0.1)
    model.zero_grad(set_to_none=True)
    loss.backward()


def step_read_backs():
    """{model: read-backs in the forward and backward pass of one training step}, for a
    2 + 2-layer model of each of bench_training_gpu.py's variants, on a synthetic batch."""
    size = ("--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 64 --decoder-embed-dim 64 "
            "--encoder-ffn-embed-dim 128 --decoder-ffn-embed-dim 128 --encoder-attention-heads 4 "
            "--decoder-attention-heads 4").split()
    counts = {}
    for name, model in bench.build_variants(size, 100).items():
        dictionary = model.decoder.dictionary
        pad = dictionary.pad()
        batch = bench.batches(1, 256, 16, len(dictionary), pad, dictionary.eos(), torch.Generator().manual_seed(0),
                              "cpu")[0]
        with stubbed(), CountOps() as ops:
            training_pass(model, batch, pad)
        counts[name] = ops.read_backs
    return counts


def step_host_ms(rounds):
    """{model: list of host milliseconds per training step, one per round} for each of
    bench_training_gpu.py's models at its depth, 64 wide, on a tiny batch, kernels stubbed."""
    narrow = ("--encoder-embed-dim 64 --decoder-embed-dim 64 --encoder-ffn-embed-dim 128 "
              "--decoder-ffn-embed-dim 128").split()
    models = bench.build_variants(narrow, 100)
    dictionary = next(iter(models.values())).decoder.dictionary
    pad = dictionary.pad()
    batch = bench.batches(1, 64, 4, len(dictionary), pad, dictionary.eos(), torch.Generator().manual_seed(0),
                          "cpu")[0]

    # One thread: a GPU's host dispatches from one, and at this size more threads only add
    # their own start-up to every op.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with stubbed():
            return interleaved_ms({name: functools.partial(training_pass, model, batch, pad)
                                   for name, model in models.items()}, rounds, min_ms=250.0)
    finally:
        torch.set_num_threads(threads)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=45, help="tokens per sentence")
    parser.add_argument("--batch", type=int, default=96, help="sentences")
    parser.add_argument("--embed-dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--step", action="store_true",
                        help="also count the read-backs of a training step's forward and backward pass, per model")
    parser.add_argument("--step-host", type=int, default=0, metavar="N",
                        help="also time the host's work in a training step, per model, over N rounds (see above)")
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.length, args.batch, args.embed_dim, requires_grad=True)
    key_padding_mask = torch.zeros(args.batch, args.length, dtype=torch.bool)
    key_padding_mask[: args.batch // 2, :3] = True
    E, H = args.embed_dim, args.heads

    def ours(normalizer, fused=True):
        module = AlphaEntmaxAttention(E, H, self_attention=True, normalizer=normalizer, causal_attn_mask=True)
        module.use_fused_kernel = fused
        return module

    modules = {
        "fairseq MultiheadAttention": lambda: MultiheadAttention(E, H, self_attention=True),
        "ours, softmax through SDPA": lambda: ours("softmax"),
        "ours, 1.5-entmax, fused": lambda: ours("entmax15"),
        "ours, alpha-entmax per head, fused": lambda: ours("alpha_entmax"),
        "ours, 1.5-entmax, explicit": lambda: ours("entmax15", fused=False),
        "ours, alpha-entmax per head, explicit": lambda: ours("alpha_entmax", fused=False),
    }
    print(f"self-attention, {args.batch} sentences of {args.length} tokens, {H} heads of {E // H}; "
          "one forward and backward pass\n")
    rows = []
    for name, make in modules.items():
        padded, read_backs, launches = count(make(), x, False, key_padding_mask)
        causal, _, _ = count(make(), x, True, key_padding_mask)
        rows.append([name, padded, causal, read_backs, launches])
    print(markdown.table(["attention", "aten ops, padding mask", "aten ops, causal", "read-backs", "Triton launches"],
                         rows))
    print("\n(a learned alpha's bound is its module's, so no alpha is read back; "
          "the explicit rows' Triton launches are the row-wise normaliser's, not counted here)")
    if args.step:
        print("\none training step, forward and backward, 2 + 2 layers, 16 sentences of about 16 tokens\n")
        print(markdown.table(["model", "read-backs"], [[name, n] for name, n in step_read_backs().items()]))
    if args.step_host:
        print()
        report_step_host(args.step_host)


def report_step_host(rounds):
    times = step_host_ms(rounds)
    stock = next(iter(times))
    print(f"host time of a training step (forward, loss, backward), one CPU thread, Triton kernels stubbed; "
          f"6 + 6 layers, 64 wide, 16 sentences of 4 tokens; {rounds} rounds\n")
    rows = []
    for name, runs in times.items():
        ratio, q1, q3 = paired_ratio(runs, times[stock])
        rows.append([name, f"{sorted(runs)[len(runs) // 2]:.1f}", f"{ratio:.2f} ({q1:.2f}-{q3:.2f})"])
    print(markdown.table(["model", "host ms per step (median)", "/ stock: median (quartiles)"], rows))


if __name__ == "__main__":
    main()
