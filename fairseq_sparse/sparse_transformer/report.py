"""Attention report of trained ``entmax_transformer`` checkpoints, and of the models built
on it (``bert_ape``, ``dual_source_transformer``): tables and PNG plots.

    fairseq-sparse-attention-report --path ckpts/checkpoint_last.pt --data DATA_BIN \\
        --split valid --out report/ [--trajectory ckpts/checkpoint*.pt] [--sentences 0 3]
    fairseq-sparse-attention-report --hf SAVED_MODEL --text sentences.txt --out report/

The second form reads a Hugging Face model saved after ``fairseq_sparse.hf.sparsify`` (or
any model of transformers' attention interface) and one sentence per line (:mod:`.hf_report`).

Writes ``report.md`` (tables) and, next to it:
  alpha_per_head.png    learned alpha of every head, by site and layer
  alpha_change.png      how far training moved each head's alpha from its initialisation
  alpha_histogram.png   distribution of the learned alphas by site
  alpha_trajectories.png  alpha of every head from initialisation across the --trajectory checkpoints
  density.png           attention density per head (fraction of allowed keys with nonzero weight)
  diversity.png         Jensen-Shannon divergence between the heads of each layer
  attention_<n>_<site><layer>.png  attention maps of the chosen sentences, one panel per head
and the head roles: previous-token, subword-merging and single-token heads.

Three steps, each its own function: ``analyse`` (the statistics, from ``stats``), ``draw``
(the figures, from ``figures``) and ``markdown_report``; the sites and their order are the
model's own (``attention_sites``).
"""

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

import torch
from fairseq import checkpoint_utils

from ..compat.checkpoint_files import num_updates
from ..markdown import table
from . import figures, stats

# A head holds a role when its score reaches this.
ROLE_THRESHOLD = 0.5


def load(path, data):
    from .. import load_plugin

    load_plugin()  # the checkpoint may be any line's (bert_ape, dual_source_transformer)
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


def collect(model, task, split, max_sentences, keep_sentences):
    """Per (site, layer): summed density, diversity, role scores and query counts over the
    first ``max_sentences`` sentences, and under "tokens" {key piece: [weight per head on
    it, queries of the sentences holding it, those sentences]}; attention maps of the
    ``keep_sentences`` ids, wherever they are in the split."""
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
                        # rows of the decoder's self and cross attention alike with the token
                        # each position predicts.
                        rows = ([tgt_dict[i] for i in batch["target"][b][tgt_keep].tolist()]
                                if kind[site] != "encoder" else pieces[queries])
                        maps[(sid, site, layer)] = (p.clone(), rows, pieces[site])
                    if counted:
                        stats.add_sentence(acc[(site, layer)], p, kind[site], pieces[site], words.get(site))
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


def head_table(values, sites, fmt="{:.3f}"):
    """A Markdown table of one value per head: a row per (site, layer), a column per head, and the mean."""
    rows = sorted(values, key=lambda sl: (sites.index(sl[0]), sl[1]))
    heads = len(values[rows[0]])
    return table(["site", "layer", *(f"h{h}" for h in range(heads)), "mean"],
                 [[s, layer, *(fmt.format(x) for x in values[(s, layer)]), fmt.format(sum(values[(s, layer)]) / heads)]
                  for s, layer in rows])


def alpha_series(model, args):
    """{(site, layer): [(updates, alpha per head)]} from the initialisation (where the
    checkpoints keep it) through the --trajectory checkpoints, ordered by update."""
    series = {}
    for updates, path in sorted((num_updates(p), p) for p in args.trajectory):
        m, _ = load(path, args.data)
        check_same_run(model, m, path, args.path)
        start = initial_alphas(m)
        for sl, a in m.head_alphas().items():
            if start is not None and sl not in series:
                series[sl] = [(0, start[sl])]
            series.setdefault(sl, []).append((updates, a.tolist()))
    return series


def analyse(model, task, args):
    """Every statistic the report states, as plain values keyed by (site, layer)."""
    acc, maps, sentences = collect(model, task, args.split, args.max_sentences, set(args.sentences))
    initial = initial_alphas(model)
    return dict(
        sites=model.attention_sites,
        alphas={sl: a.tolist() for sl, a in model.head_alphas().items()},
        initial=initial,
        change=({sl: c.tolist() for sl, c in model.head_alpha_changes().items()} if initial is not None else None),
        density=stats.per_head(acc, "density"), support=stats.per_head(acc, "support"),
        allowed={sl: a["allowed"] / a["queries"] for sl, a in acc.items()},
        diversity={sl: a["diversity"] / a["queries"] for sl, a in acc.items()},
        previous=stats.per_head(acc, "previous", "previous_queries"),
        same_word=stats.per_head(acc, "same_word", "same_word_queries"),
        tokens=stats.favourite_tokens(acc),
        series=alpha_series(model, args) if args.trajectory else None,
        maps=maps, sentences=sentences, title=f"`{args.path}`", corpus=f"Split `{args.split}`",
        query_labels={site: stats.QUERY_LABELS[model.normalizer_site(site) != "encoder"] for site in model.attention_sites})


def map_stem(sid, site, layer):
    """The file name, without its page and suffix, of a sentence's maps at one site and layer."""
    return f"attention_{sid}_{site}{layer}"


def map_files(result):
    """The PNGs of the attention maps, in the report's order (a sentence's heads may take
    several pages: figures.map_pages)."""
    names = []
    for sid, site, layer in sorted(result["maps"]):
        p, queries, keys = result["maps"][(sid, site, layer)]
        names += [name for name, _ in figures.map_pages(map_stem(sid, site, layer), p.shape[0], len(queries),
                                                        len(keys))]
    return names


def draw(result, out):
    """The report's PNGs (see the module docstring) into ``out``."""
    sites, alphas = result["sites"], result["alphas"]
    figures.heatmap(alphas, "learned alpha per head (1 = softmax, 2 = sparsemax)", out / "alpha_per_head.png",
                    sites, 1.0, 2.0, label="alpha")
    if result["change"] is not None:
        change = result["change"]
        values = [x for v in change.values() for x in v]
        bound = max(max(abs(x) for x in values), 1e-12)
        figures.heatmap(change, "alpha change since initialisation", out / "alpha_change.png", sites, -bound, bound,
                        "RdBu_r", figures.signed_format(values), label="learned minus initial alpha")
    figures.alpha_histogram(alphas, out / "alpha_histogram.png", sites)
    figures.heatmap(result["density"], "attention density (fraction of keys with nonzero weight)",
                    out / "density.png", sites, 0.0, 1.0, "magma", label="fraction of keys with nonzero weight")
    heads = len(next(iter(alphas.values())))
    figures.diversity(result["diversity"], heads, out / "diversity.png", sites, stats.max_head_diversity(heads))
    if result["series"]:
        figures.trajectories(result["series"], out / "alpha_trajectories.png", sites)
    for (sid, site, layer), (p, queries, keys) in result["maps"].items():
        figures.attention_maps(p.float().numpy(), queries, keys, alphas[(site, layer)],
                               f"sentence {sid}: {site} attention, layer {layer}", result["query_labels"][site],
                               out, map_stem(sid, site, layer))


def roles(result):
    """Rows (role, site and layer, head, score) of the heads at or above ROLE_THRESHOLD."""
    rows = []
    for key, role in (("previous", "previous-token"), ("same_word", "subword-merging")):
        for (site, layer), scores in result[key].items():
            rows += [(role, f"{site} {layer}", f"h{h}", f"{s:.2f}") for h, s in enumerate(scores)
                     if s >= ROLE_THRESHOLD]
    for (site, layer), best in result["tokens"].items():
        rows += [(f"single-token (`{piece}`)", f"{site} {layer}", f"h{h}", f"{share:.2f}")
                 for h, (piece, share) in enumerate(best) if share >= ROLE_THRESHOLD]
    return rows


def initial_order_md(initial, alphas):
    """Whether training kept the heads in the order of their ``initial`` alphas: if it did,
    where a head ends is where its initialisation put it, not a choice of its own."""
    start = [x for sl in alphas for x in initial[sl]]
    end = [x for sl in alphas for x in alphas[sl]]
    rho = stats.rank_correlation(start, end)
    if rho != rho:
        return "(Every head started at the same alpha: no initial order to keep.)"
    # Heads that moved by less than half the usual gap between neighbouring initial alphas could
    # hardly swap places: a correlation near 1 then reflects too little training, not a finding.
    moved = max(abs(a - b) for a, b in zip(start, end))
    ordered = sorted(start)
    gap = statistics.median(b - a for a, b in zip(ordered, ordered[1:]))
    if moved < gap / 2:
        return (f"(No head's alpha has moved by more than {moved:.4f} since initialisation, less than half the "
                f"median gap of {gap:.4f} between neighbouring initial alphas: too little for the heads to change "
                "order, so whether training keeps their initial order cannot be told yet.)")
    kept, pairs = stats.order_kept(initial, alphas)
    return (f"Spearman's rank correlation between the initial and the learned alphas of the {len(end)} heads: "
            f"{rho:.3f} (1: training kept the heads in the order of their initialisation); within a layer, "
            f"{kept} of {pairs} pairs of heads kept their order.")


def markdown_report(result):
    """report.md's text."""
    sites, alphas = result["sites"], result["alphas"]
    order = sorted(result["diversity"], key=lambda sl: (sites.index(sl[0]), sl[1]))
    heads = len(next(iter(alphas.values())))
    site_rows = []
    for site, vals in stats.pool_by_site(alphas, sites).items():
        below, above, coefficient = stats.bimodality(vals)
        site_rows.append([site, f"{min(vals):.2f} to {max(vals):.2f}", len(vals), f"{below:.2f}", f"{above:.2f}",
                          f"{coefficient:.3f}"])
    if result["change"] is not None:
        change_md = ["Change since initialisation (learned minus initial alpha; a random `--alpha-init` alone "
                     "spreads the heads over (alpha_min, 2)):", "", head_table(result["change"], sites,
                     figures.signed_format([x for v in result["change"].values() for x in v])),
                     "", "![](alpha_change.png)", "", initial_order_md(result["initial"], alphas)]
    else:
        change_md = ["(The initial alphas are unknown: the checkpoint was written before they were kept.)"]
    trajectory_md = []
    if result["series"]:
        series = result["series"]
        rows = sorted(series, key=lambda sl: (sites.index(sl[0]), sl[1]))
        denser, sparser, turned, counted = stats.first_moves(series)
        trajectory_md = [
            "## Alpha trajectories", "", "![](alpha_trajectories.png)", "",
            f"Of {counted} heads, {denser} first moved to denser attention (alpha down), {sparser} to sparser and "
            f"{counted - denser - sparser} by less than 0.001; {turned} of the {denser} that went denser then turned "
            f"sparser again." if counted else
            "(No head's initial alpha is known: the trajectories start at the first checkpoint.)", "",
            "Mean alpha per site and layer (update 0: initialisation):", "",
            table(["updates", *(f"{s} {layer}" for s, layer in rows)],
                  [[updates, *(f"{sum(series[sl][i][1]) / len(series[sl][i][1]):.3f}" for sl in rows)]
                   for i, (updates, _) in enumerate(series[rows[0]])]), ""]
    tokens = result["tokens"]
    report = [
        f"# Attention report: {result['title']}", "",
        f"{result['corpus']}, {result['sentences']} sentences.", "",
        "## Learned alpha per head", "", head_table(alphas, sites), "",
        "![](alpha_per_head.png) ![](alpha_histogram.png)", "",
        f"Per site: the share of heads below 1.3 and above 1.7, and Sarle's bimodality coefficient (above "
        f"{stats.BIMODAL:.3f}, a uniform distribution's, for two modes or a strong skew):", "",
        table(["site", "range", "heads", "below 1.3", "above 1.7", "bimodality coefficient"], site_rows), "",
        *change_md, "",
        "## Attention density per head", "",
        "Mean fraction of the keys a query may attend to that get nonzero weight (softmax: 1.000).", "",
        head_table(result["density"], sites), "", "![](density.png)", "",
        "## Keys attended per query", "",
        "Mean number of keys with nonzero weight per query (the support), and the mean number a query may attend "
        "to (its sentence's length, or the prefix up to it where attention is causal). Density is a query's "
        "support over that number, so the same support reads as a lower density in longer sentences.", "",
        head_table(result["support"], sites, "{:.2f}"), "",
        table(["site", "layer", "keys a query may attend to"],
              [[s, layer, f"{result['allowed'][(s, layer)]:.2f}"] for s, layer in order]), "",
        "## Head diversity per layer", "",
        f"Generalised Jensen-Shannon divergence between the {heads} heads, mean over queries "
        f"(0: all heads alike; log {heads} = {stats.max_head_diversity(heads):.3f}: disjoint).", "",
        table(["site", "layer", "JS"], [[s, layer, f"{result['diversity'][(s, layer)]:.3f}"] for s, layer in order]),
        "", "![](diversity.png)", "",
        "## Head roles", "",
        f"Mean weight a head puts on the previous token (self-attention), on the other pieces of the same word "
        f"(encoder, words split into several subwords) and on its favourite key token type (the share of the "
        f"weight of the queries of sentences that hold it, among the types in at least {stats.MIN_TOKEN_SENTENCES} "
        f"sentences); heads at or above {ROLE_THRESHOLD}:", "",
        table(["role", "site, layer", "head", "score"], roles(result) or [["(none)", "", "", ""]]), "",
        "Previous-token score per head:", "",
        head_table(result["previous"], sites) if result["previous"] else "(none)", "",
        "Subword-merging score per head:", "",
        head_table(result["same_word"], sites) if result["same_word"] else "(no multi-piece words)", "",
        "Favourite key token type per head (share):", "",
        table(["site", "layer", *(f"h{h}" for h in range(heads))],
              [[s, layer, *(f"`{piece}` {share:.2f}" for piece, share in tokens[(s, layer)])]
               for s, layer in order if (s, layer) in tokens]) if tokens else "(none)", "",
        *trajectory_md,
        "## Attention maps", "",
        *[f"![]({name})" for name in map_files(result)],
    ]
    return "\n".join(report) + "\n"


def write_report(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.hf:
        from . import hf_report

        result = hf_report.analyse(args.hf, args.text, args.sentences, args.max_sentences, args.max_length,
                                   args.tokenizer)
    else:
        model, task = load(args.path, args.data)
        result = analyse(model, task, args)
    draw(result, out)
    (out / "report.md").write_text(markdown_report(result), encoding="utf-8")
    return out / "report.md"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", help="entmax_transformer checkpoint to analyse")
    parser.add_argument("--data", help="binarized data directory (fairseq-preprocess output)")
    parser.add_argument("--hf", help="instead of --path and --data: a Hugging Face model directory (save_pretrained, "
                                     "with its tokenizer)")
    parser.add_argument("--text", help="with --hf: the sentences to read, one per line")
    parser.add_argument("--tokenizer", help="with --hf: the model's tokenizer (a directory or name), where none was "
                                            "saved beside the model (default: the one saved with it)")
    parser.add_argument("--max-length", type=int, default=128,
                        help="with --hf: tokens per sentence, longer ones cut (default: %(default)s)")
    parser.add_argument("--split", default="valid", help="data split to run, with --path (default: valid)")
    parser.add_argument("--out", required=True, help="output directory for report.md and the PNGs")
    parser.add_argument("--trajectory", nargs="*", default=[],
                        help="checkpoints to plot alpha trajectories from (ordered by their update count)")
    parser.add_argument("--sentences", nargs="*", type=int, default=[0],
                        help="ids of the sentences to draw attention maps for (default: 0)")
    parser.add_argument("--max-sentences", type=int, default=500,
                        help="sentences to average statistics over (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.hf:
        if args.path or args.data or args.trajectory:
            parser.error("--hf reads a Hugging Face model: give --text, not --path, --data or --trajectory")
        if not args.text:
            parser.error("--hf needs --text, the sentences to read (one per line)")
        if not Path(args.hf).is_dir():
            parser.error(f"--hf is not a directory: {args.hf}")
        if not Path(args.text).is_file():
            parser.error(f"--text not found: {args.text}")
        if args.max_length < 2:
            parser.error(f"--max-length {args.max_length}: must be at least 2")
    else:
        if not (args.path and args.data):
            parser.error("give --path CHECKPOINT and --data DIR (a fairseq model), or --hf DIR and --text FILE")
        if args.text or args.tokenizer:
            parser.error("--text and --tokenizer go with --hf")
        for p in [args.path, *args.trajectory]:
            if not Path(p).is_file():
                parser.error(f"checkpoint not found: {p}")
        if not Path(args.data).is_dir():
            parser.error(f"--data is not a directory: {args.data}")
    if args.max_sentences < 1:
        parser.error(f"--max-sentences {args.max_sentences}: must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        path = write_report(args)
    except (ValueError, RuntimeError, OSError) as e:  # RuntimeError: a torn file or not a checkpoint
        raise SystemExit(f"fairseq-sparse-attention-report: {e}") from None
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
