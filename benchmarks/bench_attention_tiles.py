"""Key tiles the fused entmax attention visits, forward and backward, against visiting every
tile in every pass, per input family.

A visit is one (query tile, key tile) pair whose scores a kernel computes from q and k.
The forward kernel makes one pass for the row maxima, one per Newton step, maybe one on
the support, one for the output and maybe one for the alpha statistics; it skips a key
tile once the tile can hold no support for any row of its query tile (every Newton
iterate is a lower bound of the threshold, so such a tile stays off the support), and
records its visits (``KernelConfig.diagnostics``).  Visiting every tile in every pass would make
passes x tiles.  The backward kernels (dk and dv over query tiles, dq and d alpha over
key tiles) visit only the pairs of the forward's block mask, against every pair before;
the causal mask's pairs past the diagonal are never counted.

The counts depend on the scores and the tile shape, not on the device: without CUDA the
kernels run under Triton's interpreter on CPU tensors, at the GPU's tiles (64 x 64).

    python benchmarks/bench_attention_tiles.py                       # T 1024, gaussian and structured
    python benchmarks/bench_attention_tiles.py --lengths 1024 4096 --densities 0.1 0.3 0.5 --causal
    python benchmarks/bench_attention_tiles.py ... --json tiles.json --plot tiles.png
    python benchmarks/bench_attention_tiles.py --fit captured_m30k.pt --captured captured_m30k.pt --lengths 512

``--plot`` draws the forward + backward visits against the block density, one line per
length and normaliser (several ``--json`` files of earlier runs, causal or not, with ``--from``).
"""

import argparse
import json
import os

import torch

if not torch.cuda.is_available():  # before the kernels are defined
    os.environ.setdefault("TRITON_INTERPRET", "1")

import attention_inputs  # noqa: E402
from fairseq_sparse.entmax import kernels  # noqa: E402
from fairseq_sparse.entmax.kernels import fixed_kind  # noqa: E402
from fairseq_sparse.entmax.kernels.config import DIAG_PASSES, DIAG_TILES  # noqa: E402
from fairseq_sparse.entmax.masks import sequence_ids  # noqa: E402


def visits(q, k, v, alpha, causal, tiles, scale=None, cu_seqlens=None, window=None):
    """(forward visits, forward visits if every tile were visited in every pass, backward
    visits, backward visits of every pair, block density, forward visits if none were
    wasted) of one forward and its backward.  A visit is wasted when a pass after the
    maxima's computes a tile without support: the least the forward can make at its own
    passes is every tile in reach once and the tiles with support in every later pass
    (None with ``cu_seqlens`` or ``window``, whose first pass keeps to fewer tiles).
    With ``cu_seqlens`` (packed sequences) or ``window`` (a sliding window) the kernel keeps to
    the tiles that share a sequence or the window; the baseline stays every tile in (causal)
    reach, what a kernel without them visits."""
    device = q.device
    H = q.shape[1]
    heads = alpha.float().to(device) if torch.is_tensor(alpha) else torch.full((H,), alpha, device=device)
    config = kernels.KernelConfig(tiles=(*tiles, 4, None), diagnostics=True)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    packed = None if cu_seqlens is None else kernels.packing(cu_seqlens, sequence_ids(cu_seqlens, q, k))
    call = kernels.Call(fixed=fixed_kind(alpha), scale=scale, causal=causal, window=window, packed=packed,
                        config=config)
    out = kernels.forward(q, k, v, heads, call, alpha_stats=torch.is_tensor(alpha))
    counts, blocks = out.diagnostics, out.blocks
    block_m, block_n = tiles
    Tq, Tk = q.shape[2], k.shape[2]
    starts = torch.arange(0, Tq, block_m, device=device)
    # Key tiles in reach of each query tile (the kernels' tiles._key_end).
    ends = (starts + block_m + (Tk - Tq)).clamp(0, Tk) if causal else torch.full_like(starts, Tk)
    reach = (ends + block_n - 1) // block_n  # (query tiles,)
    passes = counts[:, DIAG_PASSES, ::block_m]  # (B * H, query tiles)
    forward_all = float((passes * reach[None, :]).sum())
    forward_new = float(counts[:, DIAG_TILES, ::block_m].sum())
    pairs = float(reach.sum()) * counts.shape[0]
    held = float(torch.isfinite(blocks).sum())
    support = torch.isfinite(blocks).sum(-1)  # (B * H, query tiles)
    least = None if packed is not None or window is not None else float((reach[None, :] + (passes - 1) * support).sum())
    return forward_new, forward_all, 2 * held, 2 * pairs, held / pairs, least


def inputs(family, batch, heads, length, head_dim, density, tiles, causal, shape=None):
    """(q, k, v) of an input family; ``shape``: structured inputs' (width, global keys)."""
    if family == "gaussian":
        return attention_inputs.gaussian(batch, heads, length, head_dim, seed=length)
    width, global_keys = shape or (16.0, 2)
    return attention_inputs.structured(batch, heads, length, head_dim, density, tiles=tiles, causal=causal,
                                       seed=length, width=width, global_keys=global_keys)[:3]


def count(rows, args, q, k, v, alpha, tiles, scale=None, causal=None, cu_seqlens=None, **row):
    """Count one setting's visits, print its table row and keep it in ``rows`` (and --json);
    ``causal`` (None: --causal's) and ``cu_seqlens`` are a capture's own."""
    causal = args.causal if causal is None else causal
    fwd, fwd_all, bwd, bwd_all, held, least = visits(q, k, v, alpha, causal, tiles, scale, cu_seqlens, args.window)
    total = (fwd + bwd) / (fwd_all + bwd_all)
    floor = None if least is None else (least + bwd) / (fwd_all + bwd_all)
    print(f"| {row['T']} | {row['input']} | {held:.2f} | {row['normalizer']} | {fwd / fwd_all:.2f}x | "
          f"{bwd / bwd_all:.2f}x | {total:.3f}x | {'-' if floor is None else f'{floor:.3f}x'} |", flush=True)
    rows.append(dict(row, density=held, causal=causal, packed=cu_seqlens is not None, window=args.window,
                     forward=fwd / fwd_all, backward=bwd / bwd_all, total=total, least=floor))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024])
    parser.add_argument("--families", nargs="+", default=["gaussian", "structured"], choices=["gaussian", "structured"])
    parser.add_argument("--densities", type=float, nargs="+", default=[0.1, 0.3, 0.5],
                        help="block densities of the structured inputs (found by bisection; the measured one is "
                             "printed)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--window", type=int, help="with --causal: a sliding window of this many keys")
    parser.add_argument("--tiles", type=int, nargs=2, default=[64, 64], metavar=("BLOCK_M", "BLOCK_N"))
    parser.add_argument("--captured", nargs="+", default=[],
                        help="captures of a trained model's q, k, v (benchmarks/capture_attention.py): each "
                             "attention module at its own heads' alphas and at 1.5, after the other families")
    parser.add_argument("--fit", help="a capture whose band width and global keys the structured inputs take "
                                      "(attention_inputs.fit), its own block density added to --densities")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--plot", help="draw visits against block density to this PNG")
    parser.add_argument("--from", dest="sources", nargs="+", default=[],
                        help="with --plot: draw the rows of these --json files instead of counting")
    args = parser.parse_args()
    if args.window is not None and not args.causal:
        parser.error("--window needs --causal (a sliding window is causal)")
    if args.sources:
        # Files written before the column was spelt "normalizer" name it "normaliser".
        rows = [{("normalizer" if k == "normaliser" else k): v for k, v in row.items()}
                for path in args.sources for row in json.load(open(path))]
        plot(rows, args.plot)
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tiles = tuple(args.tiles)
    print(f"{torch.cuda.get_device_name() if device == 'cuda' else 'CPU, Triton interpreter'}; float32, "
          f"B={args.batch} H={args.heads} head_dim={args.head_dim}; {'causal' if args.causal else 'not causal'}"
          f"{'' if args.window is None else f' within a window of {args.window} keys'}; "
          f"tiles {tiles[0]} x {tiles[1]}; visits as ratios to visiting every tile in every pass")
    print("| T | input | block density | normaliser | forward | backward | forward + backward | with no visit wasted |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    shape, densities = None, list(args.densities)
    if args.fit:
        fitted = attention_inputs.fit(attention_inputs.captured(args.fit), tiles)
        shape, densities = (fitted.width, fitted.global_keys), sorted({*densities, round(fitted.density, 3)})
        print(f"structured inputs fitted to {args.fit}: band width {fitted.width:.1f}, {fitted.global_keys} global "
              f"keys (mean distance {fitted.fitted_distance:.1f} against the capture's {fitted.distance:.1f}; "
              f"its block density {fitted.density:.2f})")
    for T in args.lengths:
        for family in args.families:
            for density in ([None] if family == "gaussian" else densities):
                q, k, v = (t.to(device) for t in inputs(family, args.batch, args.heads, T, args.head_dim, density,
                                                        tiles, args.causal, shape))
                name = family if density is None else f"{family} ({density:g} asked)"
                for label, alpha in (("1.5-entmax", 1.5),
                                     ("alpha per head", torch.linspace(1.25, 1.75, args.heads))):
                    count(rows, args, q, k, v, alpha, tiles, T=T, input=name, family=family, normalizer=label)
    for path in args.captured:
        for layer in attention_inputs.captured(path):
            q, k, v = layer.q.to(device), layer.k.to(device), layer.v.to(device)
            packed = "" if layer.cu_seqlens is None else f", {len(layer.cu_seqlens) - 1} sentences packed"
            for label, alpha in (("learned alphas", layer.alpha), ("1.5-entmax", 1.5)):
                weights = attention_inputs.attention_density(layer, alpha)
                count(rows, args, q, k, v, alpha, tiles, layer.scale, layer.causal, layer.cu_seqlens, T=q.shape[2],
                      input=f"captured {layer.module}{packed} (attention density {weights:.2f})", family="captured",
                      module=layer.module, normalizer=label, attention_density=weights)
    if args.plot:
        plot(rows, args.plot)


def plot(rows, path):
    """Forward + backward visits (as a share of every tile in every pass) against the block
    density: a line per length, normaliser and masking of the structured inputs, markers for
    the N(0, 1) inputs and for each capture at its own alphas (packed or not)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.6), layout="constrained")
    def key(r):
        return r["family"], r["T"], r["normalizer"], r["causal"], r.get("packed", False)

    shown = [r for r in rows if r["family"] == "structured" or r["normalizer"] == "learned alphas"]
    for i, (family, T, label, causal, packed) in enumerate(sorted({key(r) for r in shown})):
        points = sorted((r["density"], r["total"]) for r in shown if key(r) == (family, T, label, causal, packed))
        captured = family == "captured"
        ax.plot(*zip(*points), marker="s" if captured else "o", color=f"C{i % 10}",
                ls="none" if captured else "--" if causal else "-",
                label=f"{family}{', packed' if packed else ''}, T = {T:,}, {label}{', causal' if causal else ''}")
    gaussian = [(r["density"], r["total"]) for r in rows if r["family"] == "gaussian"]
    if gaussian:  # every length, normaliser and masking: the same point
        ax.plot(*zip(*gaussian), marker="x", ls="none", color="black", label="N(0, 1), every setting")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":", label="visits = block density")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("block density (share of the tile pairs in reach that hold support)")
    ax.set_ylabel("tiles visited, forward + backward\n(share of every tile in every pass)")
    ax.set_title("fused entmax attention: tiles visited against block density", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
