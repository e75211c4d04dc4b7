"""Attention report of trained ``entmax_transformer`` checkpoints, and of the models built
on it (``bert_ape``, ``dual_source_transformer``): tables and PNG plots.

    fairseq-sparse-attention-report --path ckpts/checkpoint_last.pt --data DATA_BIN \\
        --split valid --out report/ [--trajectory ckpts/checkpoint*.pt] [--sentences 0 3]

Writes ``report.md`` (tables) and, next to it:
  alpha_per_head.png    learned alpha of every head, by site and layer
  alpha_change.png      how far training moved each head's alpha from its initialisation
  alpha_histogram.png   distribution of the learned alphas by site
  alpha_trajectories.png  alpha of every head from initialisation across the --trajectory checkpoints
  density.png           attention density per head (fraction of allowed keys with nonzero weight)
  diversity.png         Jensen-Shannon divergence between the heads of each layer
  attention_<n>_<site><layer>.png  attention maps of the chosen sentences, one panel per head
and a head-role table: previous-token heads and subword-merging heads.
"""

import argparse
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from fairseq import checkpoint_utils  # noqa: E402

from . import stats  # noqa: E402  (importing this package loads the plugin: models, checkpoint allow-list)

# dual_source_transformer adds an mt encoder and a decoder attention over it.
SITES = ("encoder", "mt_encoder", "decoder", "cross", "mt_cross")
ROLE_THRESHOLD = 0.5


def load(path, data):
    try:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(data)})
    except ValueError as e:  # a vocabulary or task that does not fit --data: which checkpoint it was
        raise ValueError(f"{path} with --data {data}: {e}") from None
    model = models[0].eval()
    if not hasattr(model, "attention_modules"):
        raise ValueError(f"{path}: not a checkpoint of entmax_transformer or a model built on it (bert_ape, "
                         f"dual_source_transformer); model {type(model).__name__}")
    return model, task


def initial_alphas(model):
    """{(site, layer): alpha per head at initialisation}, or None where the checkpoint predates keeping them."""
    initial = {sl: a.tolist() for sl, a in model.head_alphas(initial=True).items()}
    return None if any(x != x for v in initial.values() for x in v) else initial


def check_same_run(model, other, path, reference):
    """Refuse a --trajectory checkpoint that is not of the run of ``reference`` (the --path
    model): another architecture, other attention heads or other initial alphas would be
    plotted as this run's history."""
    def heads(m):
        return {sl: a.tolist() for sl, a in m.head_alphas(initial=True).items()}

    mine, theirs = heads(model), heads(other)
    why = None
    if type(other) is not type(model):
        why = f"a {type(other).__name__}, not a {type(model).__name__}"
    elif {sl: len(a) for sl, a in theirs.items()} != {sl: len(a) for sl, a in mine.items()}:
        why = "other attention sites, layers or heads"
    elif any(abs(x - y) > 1e-6 for sl in mine for x, y in zip(mine[sl], theirs[sl]) if x == x and y == y):
        why = "other initial alphas (another normaliser, seed or --alpha-init)"
    if why is not None:
        raise ValueError(f"--trajectory {path}: not a checkpoint of the run of --path {reference} ({why}); give "
                         "the checkpoints that run saved")


def num_updates(path):
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))  # a torn or foreign file is named
    history = state.get("optimizer_history") or [{}]
    return history[-1].get("num_updates", 0)


def collect(model, task, split, max_sentences, keep_sentences):
    """Per (site, layer): summed density, diversity, role scores and query counts over the
    first ``max_sentences`` sentences; attention maps of the ``keep_sentences`` ids, wherever
    they are in the split."""
    task.load_dataset(split)
    dataset = task.dataset(split)
    outside = sorted(i for i in keep_sentences if not 0 <= i < len(dataset))
    if outside:
        raise ValueError(f"--sentences {' '.join(map(str, outside))}: split {split} has {len(dataset)} sentences "
                         f"(ids 0 to {len(dataset) - 1})")
    itr = task.get_batch_iterator(dataset, max_tokens=4000, max_positions=model.max_positions(),
                                  ignore_invalid_inputs=True).next_epoch_itr(shuffle=False)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    pad = src_dict.pad()
    specials = {src_dict[i] for i in (src_dict.bos(), src_dict.eos(), src_dict.pad())}
    modules = {(site, i): m for site, i, m in model.attention_modules()}
    # Each site's kind: encoder self-attention, decoder self-attention or cross attention.
    kind = {site: model.normalizer_site(site) for site, _ in modules}
    for m in modules.values():
        m.record_attention = True
    acc = defaultdict(lambda: defaultdict(float))
    maps, seen, missing = {}, 0, set(keep_sentences)
    with torch.no_grad():
        for batch in itr:
            model(**batch["net_input"])
            src, tgt = batch["net_input"]["src_tokens"], batch["net_input"]["prev_output_tokens"]
            sources = model.attended_sources(src)
            for b in range(src.size(0)):
                sid = int(batch["id"][b])
                counted = seen < max_sentences
                if not counted and sid not in missing:
                    continue
                tgt_keep = tgt[b].ne(pad)
                keep = {site: tokens[b].ne(pad) for site, tokens in sources.items()}
                keep["decoder"] = tgt_keep
                # One label per position, special symbols included ([CLS] src [SEP] mt [SEP]
                # for ape): Dictionary.string() drops bos and eos and would shift the labels.
                pieces = {site: [src_dict[i] for i in tokens[b][keep[site]].tolist()] for site, tokens in sources.items()}
                pieces["decoder"] = [tgt_dict[i] for i in tgt[b][tgt_keep].tolist()]
                words = {site: stats.word_ids_from_pieces(pieces[site], specials)
                         for site in sources if kind[site] == "encoder"}
                for (site, layer), m in modules.items():
                    queries = site if kind[site] == "encoder" else "decoder"
                    p = m.last_attention[b][:, keep[queries]][:, :, keep[site]]
                    if sid in missing:
                        # Rows and columns are labelled with the token at each position; the
                        # rows of a cross attention with the token each position predicts.
                        rows = ([tgt_dict[i] for i in batch["target"][b][tgt_keep].tolist()]
                                if kind[site] == "cross" else pieces[queries])
                        maps[(sid, site, layer)] = (p.clone(), rows, pieces[site])
                    if not counted:
                        continue
                    allowed = torch.ones(p.shape[1:], dtype=torch.bool)
                    if site == "decoder":
                        allowed = torch.tril(allowed)
                    a = acc[(site, layer)]
                    a["queries"] += p.size(1)
                    a["density"] = a["density"] + stats.density(p, allowed)
                    a["diversity"] += float(stats.head_diversity(p))
                    if kind[site] != "cross":
                        a["previous"] = a["previous"] + stats.previous_token_score(p)
                        a["previous_queries"] += p.size(1) - 1
                    if kind[site] == "encoder":
                        score, count = stats.same_word_score(p, words[site])
                        a["same_word"] = a["same_word"] + score
                        a["same_word_queries"] += count
                missing.discard(sid)
                seen += counted
            if seen >= max_sentences and not missing:
                break
    for m in modules.values():
        m.record_attention, m.last_attention = False, None
    if missing:
        raise ValueError(f"--sentences {' '.join(map(str, sorted(missing)))}: longer than the model's positions "
                         f"{model.max_positions()}, so left out of split {split}")
    return acc, maps, seen


def per_head(acc, key, count_key="queries"):
    return {sl: (a[key] / max(a[count_key], 1)).tolist() for sl, a in acc.items() if count_key in a and a[count_key]}


def heatmap(values, title, path, vmin=None, vmax=None, cmap="viridis", fmt="{:.2f}", text_color="w"):
    rows = sorted(values, key=lambda sl: (SITES.index(sl[0]), sl[1]))
    matrix = [values[r] for r in rows]
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(matrix[0]), 0.8 + 0.45 * len(rows)))
    im = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_yticks(range(len(rows)), [f"{s} {layer}" for s, layer in rows])
    ax.set_xticks(range(len(matrix[0])), [f"h{h}" for h in range(len(matrix[0]))])
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=7, color=text_color)
    fig.colorbar(im, ax=ax)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(values, fmt="{:.3f}"):
    rows = sorted(values, key=lambda sl: (SITES.index(sl[0]), sl[1]))
    heads = len(values[rows[0]])
    lines = ["| site | layer | " + " | ".join(f"h{h}" for h in range(heads)) + " | mean |",
             "| --- | --- | " + " | ".join("---" for _ in range(heads)) + " | --- |"]
    for s, layer in rows:
        v = values[(s, layer)]
        lines.append(f"| {s} | {layer} | " + " | ".join(fmt.format(x) for x in v) + f" | {fmt.format(sum(v) / len(v))} |")
    return "\n".join(lines)


def write_report(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, task = load(args.path, args.data)
    alphas = {sl: a.tolist() for sl, a in model.head_alphas().items()}
    initial = initial_alphas(model)
    acc, maps, sentences = collect(model, task, args.split, args.max_sentences, set(args.sentences))
    dens = per_head(acc, "density")
    diversity = {sl: a["diversity"] / a["queries"] for sl, a in acc.items()}
    previous = per_head(acc, "previous", "previous_queries")
    same_word = per_head(acc, "same_word", "same_word_queries")

    heatmap(alphas, "learned alpha per head (1 = softmax, 2 = sparsemax)", out / "alpha_per_head.png", 1.0, 2.0)
    if initial is not None:
        change = {sl: c.tolist() for sl, c in model.head_alpha_changes().items()}
        bound = max(max(abs(x) for v in change.values() for x in v), 1e-3)
        heatmap(change, "alpha change since initialisation", out / "alpha_change.png", -bound, bound, "RdBu_r",
                "{:+.3f}", "k")
        change_md = ["Change since initialisation (learned minus initial alpha; a random `--alpha-init` alone "
                     "spreads the heads over (alpha_min, 2)):", "", table(change, "{:+.3f}"), "", "![](alpha_change.png)"]
    else:
        change_md = ["(The initial alphas are unknown: the checkpoint was written before they were kept.)"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for site in SITES:
        vals = [x for (s, _), v in alphas.items() if s == site for x in v]
        if vals:
            ax.hist(vals, bins=20, range=(1, 2), alpha=0.6, label=site)
    ax.set_xlabel("alpha")
    ax.set_ylabel("heads")
    ax.legend()
    ax.set_title("learned alpha by attention site")
    fig.tight_layout()
    fig.savefig(out / "alpha_histogram.png", dpi=120)
    plt.close(fig)
    heatmap(dens, "attention density (fraction of keys with nonzero weight)", out / "density.png", 0.0, 1.0, "magma")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for site in SITES:
        layers = sorted(layer for s, layer in diversity if s == site)
        if layers:
            ax.plot(layers, [diversity[(site, layer)] for layer in layers], marker="o", label=site)
    heads = len(next(iter(alphas.values())))
    ax.axhline(stats.max_head_diversity(heads), ls="--", c="gray", label=f"log {heads} (disjoint heads)")
    ax.set_xlabel("layer")
    ax.set_xticks(sorted({layer for _, layer in diversity}))
    ax.set_ylabel("Jensen-Shannon divergence")
    ax.set_title("head diversity per layer")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "diversity.png", dpi=120)
    plt.close(fig)

    trajectory_md = ""
    if args.trajectory:
        points = sorted((num_updates(p), p) for p in args.trajectory)
        series = {}  # (site, layer) -> [(updates, alpha per head)]
        for updates, path in points:
            m, _ = load(path, args.data)
            check_same_run(model, m, path, args.path)
            start = initial_alphas(m)
            for sl, a in m.head_alphas().items():
                if start is not None and sl not in series:
                    series[sl] = [(0, start[sl])]
                series.setdefault(sl, []).append((updates, a.tolist()))
        rows = sorted(series, key=lambda sl: (SITES.index(sl[0]), sl[1]))
        sites = [site for site in SITES if any(s == site for s, _ in rows)]
        layers = max(layer for _, layer in rows) + 1
        # One panel per attention module: a row per site, a column per layer.
        fig, axes = plt.subplots(len(sites), layers, figsize=(max(2.6 * layers, 5.2), 2.4 * len(sites)), sharex=True,
                                 sharey=True, squeeze=False)
        for ax in axes.flat:
            ax.set_visible(False)
        for site, layer in rows:
            ax = axes[sites.index(site), layer]
            ax.set_visible(True)
            pts = series[(site, layer)]
            for h in range(len(pts[0][1])):
                ax.plot([u for u, _ in pts], [a[h] for _, a in pts], marker=".", lw=1, label=f"h{h}")
            ax.set_title(f"{site} {layer}", fontsize=9)
        for ax in axes[-1]:
            ax.set_xlabel("updates")
        for ax in axes[:, 0]:
            ax.set_ylabel("alpha")
        axes[0, 0].set_ylim(1.0, 2.0)
        axes[0, 0].legend(fontsize=6)
        fig.suptitle("alpha trajectories per head (update 0: initialisation)")
        fig.tight_layout()
        fig.savefig(out / "alpha_trajectories.png", dpi=120)
        plt.close(fig)
        trajectory_md = ("\n## Alpha trajectories\n\n![](alpha_trajectories.png)\n\nMean alpha per site and layer "
                         "(update 0: initialisation):\n\n| updates | " + " | ".join(f"{s} {layer}" for s, layer in rows)
                         + " |\n|" + " --- |" * (len(rows) + 1) + "\n")
        for i, (updates, _) in enumerate(series[rows[0]]):
            trajectory_md += f"| {updates} | " + " | ".join(
                f"{sum(series[sl][i][1]) / len(series[sl][i][1]):.3f}" for sl in rows) + " |\n"

    for (sid, site, layer), (p, queries, keys) in maps.items():
        cross = model.normalizer_site(site) == "cross"
        h = p.size(0)
        # Panels grow with the sentence so that every position keeps a readable label.
        width, height = max(3.2, 0.11 * len(keys) + 0.8), max(3.4, 0.11 * len(queries) + 1.6)
        fig, axes = plt.subplots(1, h, figsize=(width * h, height), squeeze=False)
        for j in range(h):
            ax = axes[0, j]
            ax.imshow(p[j], cmap="Greys", vmin=0, vmax=1, aspect="auto")
            ax.set_title(f"head {j}, alpha {alphas[(site, layer)][j]:.2f}", fontsize=8)
            ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=5)
            ax.set_yticks(range(len(queries)), queries, fontsize=5)
            ax.set_xlabel("key (token at the position)", fontsize=6)
        axes[0, 0].set_ylabel("query (token it predicts)" if cross else "query (token at the position)",
                              fontsize=6)
        fig.suptitle(f"sentence {sid}: {site} attention, layer {layer}")
        fig.tight_layout()
        fig.savefig(out / f"attention_{sid}_{site}{layer}.png", dpi=120)
        plt.close(fig)

    roles = []
    for (site, layer), scores in previous.items():
        roles += [f"| previous-token | {site} {layer} | h{h} | {s:.2f} |" for h, s in enumerate(scores) if s >= ROLE_THRESHOLD]
    for (site, layer), scores in same_word.items():
        roles += [f"| subword-merging | {site} {layer} | h{h} | {s:.2f} |" for h, s in enumerate(scores) if s >= ROLE_THRESHOLD]

    report = [
        f"# Attention report: `{args.path}`", "",
        f"Split `{args.split}`, {sentences} sentences.", "",
        "## Learned alpha per head", "", table(alphas), "", "![](alpha_per_head.png) ![](alpha_histogram.png)", "",
        *change_md, "",
        "## Attention density per head", "",
        "Mean fraction of the keys a query may attend to that get nonzero weight (softmax: 1.000).", "",
        table(dens), "", "![](density.png)", "",
        "## Head diversity per layer", "",
        f"Generalised Jensen-Shannon divergence between the {heads} heads, mean over queries "
        f"(0: all heads alike; log {heads} = {stats.max_head_diversity(heads):.3f}: disjoint).", "",
        "| site | layer | JS |", "| --- | --- | --- |",
        *[f"| {s} | {layer} | {diversity[(s, layer)]:.3f} |" for s, layer in sorted(diversity, key=lambda sl: (SITES.index(sl[0]), sl[1]))],
        "", "![](diversity.png)", "",
        "## Head roles", "",
        f"Mean weight a head puts on the previous token (self-attention) and on the other pieces of the "
        f"same word (encoder, words split into several subwords); heads at or above {ROLE_THRESHOLD}:", "",
        "| role | site, layer | head | score |", "| --- | --- | --- | --- |", *(roles or ["| (none) | | | |"]), "",
        "Previous-token score per head:", "", table(previous) if previous else "(none)", "",
        "Subword-merging score per head:", "", table(same_word) if same_word else "(no multi-piece words)", "",
        trajectory_md,
        "## Attention maps", "",
        *[f"![](attention_{sid}_{site}{layer}.png)" for sid, site, layer in sorted(maps)],
    ]
    (out / "report.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    return out / "report.md"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", required=True, help="entmax_transformer checkpoint to analyse")
    parser.add_argument("--data", required=True, help="binarised data directory (fairseq-preprocess output)")
    parser.add_argument("--split", default="valid", help="data split to run (default: valid)")
    parser.add_argument("--out", required=True, help="output directory for report.md and the PNGs")
    parser.add_argument("--trajectory", nargs="*", default=[],
                        help="checkpoints to plot alpha trajectories from (ordered by their update count)")
    parser.add_argument("--sentences", nargs="*", type=int, default=[0],
                        help="ids of the sentences to draw attention maps for (default: 0)")
    parser.add_argument("--max-sentences", type=int, default=500,
                        help="sentences to average statistics over (default: %(default)s)")
    args = parser.parse_args(argv)
    for p in [args.path, *args.trajectory]:
        if not Path(p).is_file():
            parser.error(f"checkpoint not found: {p}")
    if not Path(args.data).is_dir():
        parser.error(f"--data is not a directory: {args.data}")
    if args.max_sentences < 1:
        parser.error(f"--max-sentences {args.max_sentences}: must be at least 1")
    return args


def main(argv=None):
    path = write_report(parse_args(argv))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
