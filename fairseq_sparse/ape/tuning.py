"""Choose --conservativeness (C) and the keep-the-MT gate, --keep-mt-margin (M) with
--keep-mt-max-edits (E), for one trained APE checkpoint (or an ensemble of them) on the
dev split, by generation only (no retraining).

    fairseq-sparse-tune-ape --path CKPT[:CKPT...] --data DATA_DIR --out DIR [--split valid]
        [--conservativeness 0 0.5 1 2 4] [--keep-mt-margin off -0.5 0 0.5 inf]
        [--keep-mt-max-edits off 1 2 3] [--beam 5]

Each C costs one beam pass over the split, in which the gate scores every MT but
keeps none (M = -inf) and lists what it weighed; every M, with every E, is then
applied to those scores with the gate's own rule (``fairseq_sparse.ape.decoding.MarginRule``
and ``word_edits``), so the grid's outputs are those ``fairseq-generate
--conservativeness C --keep-mt-margin M --keep-mt-max-edits E`` gives (``--nbest 1``).
The setting with the lowest TER wins (ties: the smaller C, then no edit limit before a
larger one before a smaller, then the larger M).  Each text's sentence TER is computed
once and shared by every setting that outputs it.

Writes DIR/grid.md and grid.tsv (TER, BLEU, modified, improved, deteriorated and kept
for every C x M x E), DIR/chosen.json (the choice, and under ``by_gate`` the best
setting without a gate, with the margin gate alone and with the margin gate and an
edit limit, so that ape_experiment.py can compare them on test), and DIR/tuning.png:
TER against C without a gate and against M (one line per E) at the chosen C, with doing
nothing as a line.  Scoring is as in ape_experiment.py: TER (tercom settings) and BLEU
``-tok none`` with sacrebleu; with an uncased BERT every text (doing nothing included)
on that BERT's spelling.
"""

import argparse
import json
import math
from pathlib import Path

from ..markdown import table
from ..modules.bert import load_bert_tokenizer
from .bert_dictionary import model_spelling
from .decoding import MarginRule, check_decoding_options, word_edits
from .postedit import PostEditor
from .ter import ape_scores, corpus_ter, edit_effects, official_bleu, official_ter
from .triplets import read_triplets

DEFAULT_CONSERVATIVENESS = [0.0, 0.5, 1.0, 2.0, 4.0]
DEFAULT_MARGINS = [None, -0.5, -0.25, 0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, math.inf]
# Word edits between a post-edit and its MT (None: no limit): repairs are mostly small edits
# (docs/notes/ape.md#why-an-edit-limit).
DEFAULT_MAX_EDITS = [None, 1, 2, 3, 5, 10]


def grid_value(value, option, check, off=False, cast=float, kind="a number"):
    """One value of a grid option as ``cast`` makes it (``off`` is None where allowed),
    refused as the task refuses it (``check`` raises the task's ValueError)."""
    if off and str(value).lower() == "off":
        return None
    try:
        number = cast(value)
    except ValueError:
        raise SystemExit(f"{option} {value}: not {kind}" + (" or 'off'" if off else "")) from None
    try:
        check(number)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    return number


def parse_margins(values):
    """'off' is no gate (None); anything else a float, NaN refused as the task refuses it."""
    return [grid_value(v, "--keep-mt-margin", lambda m: check_decoding_options(0.0, m), off=True) for v in values]


def parse_max_edits(values):
    """'off' is no limit (None); anything else a whole number >= 0, refused as the task refuses it."""
    return [grid_value(v, "--keep-mt-max-edits", lambda e: check_decoding_options(0.0, 0.0, e), off=True,
                       cast=int, kind="a whole number") for v in values]


def margin_name(margin):
    return "off" if margin is None else f"{margin:g}"


def setting_name(conservativeness, margin, max_edits=None):
    """How a table names a decoding setting: 'C = 0, M = 0.1' or 'C = 0, M = 0.2, E = 2'."""
    return f"C = {conservativeness:g}, M = {margin_name(margin)}" + ("" if max_edits is None else f", E = {max_edits}")


class Scorer:
    """TER, BLEU and edit effects against fixed references, every text on one spelling."""

    def __init__(self, tokenizer_dir, mts, refs):
        tokenizer = load_bert_tokenizer(tokenizer_dir)
        if getattr(tokenizer, "do_lower_case", False):
            self.spell = lambda lines: model_spelling(tokenizer, lines)
            self.spelling = ("Every text (outputs, MT, references) is scored on the uncased BERT's spelling of it: "
                             "lowercased, accents removed, the data's tokenisation kept")
        else:
            self.spell = list
            self.spelling = "Scored case-sensitively on the text as is"
        self.mts, self.refs = self.spell(mts), self.spell(refs)
        self.signatures = ape_scores(self.mts, self.refs)[1::2]
        self.ter, self.sentences = official_ter(), {}

    def sentence_ter(self, i, text):
        """sacrebleu's sentence TER of (spelled) text against reference i, computed once."""
        if (i, text) not in self.sentences:
            self.sentences[i, text] = self.ter.sentence_score(text, [self.refs[i]])
        return self.sentences[i, text]

    def score(self, hyps):
        """(TER, BLEU, edit effects) of one output per reference, as ``ape_scores`` and
        ``edit_effects`` give them: corpus TER is sacrebleu's sum of the sentences' statistics
        (edits over reference words), here from statistics shared by every setting of a grid
        that outputs the same sentence."""
        hyps = self.spell(hyps)
        if len(hyps) != len(self.refs):
            raise ValueError(f"{len(hyps)} outputs for {len(self.refs)} references")
        scores = [self.sentence_ter(i, h) for i, h in enumerate(hyps)]
        ter = corpus_ter(self.ter, scores, hyps, self.refs).score
        bleu = official_bleu().corpus_score(hyps, [self.refs]).score
        return ter, bleu, edit_effects(hyps, self.mts, self.refs, lambda i, text: self.sentence_ter(i, text).score)


def beam_pass(models, task, conservativeness, src, mt, beam, max_len_b=200):
    """One beam pass with conservativeness C; the gate scores each MT but keeps none, and
    lists the candidates it weighed."""
    editor = PostEditor(models, task, beam=beam, max_len_b=max_len_b, conservativeness=conservativeness,
                        keep_mt_margin=-math.inf)
    return editor.postedits(src, mt)


def mt_distances(edits):
    """Per sentence, each candidate's word edits to its MT (``word_edits``, on the text the model
    writes, as the gate measures them)."""
    distances = []
    for edit in edits:
        mt_text = next(c.text for c in edit.candidates if c.is_mt)
        distances.append([0 if c.is_mt else word_edits(c.text, mt_text) for c in edit.candidates])
    return distances


def gated(edits, mts, margin, max_edits=None, distances=None):
    """(outputs, how many are the MT) of one beam pass under the gate with this margin (and
    edit limit, with the pass's ``mt_distances``): the gate's first choice, the best
    hypothesis that outranks the MT (``MarginRule.first``), else the MT."""
    outputs, kept = [], 0
    rule = None if margin is None else MarginRule(margin, max_edits)
    for i, (edit, mt) in enumerate(zip(edits, mts, strict=True)):
        if rule is None:
            keep, text = edit.is_mt, edit.text
        else:
            # The candidates in the beam's order, the MT last unless the beam found it.
            first = rule.first([c.score for c in edit.candidates], edit.mt_score, distances[i] if distances else None)
            keep = first is None or edit.candidates[first].is_mt
            text = None if keep else edit.candidates[first].text
        outputs.append(mt if keep else text)
        kept += keep
    return outputs, kept


def load(path, data, device):
    editor = PostEditor.from_checkpoint(path, data=data, device=device, beam=1)
    return editor.models, editor.task


GATES = ("none", "margin", "margin_edits")
SETTING = ("conservativeness", "keep_mt_margin", "keep_mt_max_edits")


def gate_of(row):
    """Which gate a grid row used: none, the margin gate (M) or the margin gate with an edit
    limit (M, E)."""
    if row["keep_mt_margin"] is None:
        return "none"
    return "margin" if row.get("keep_mt_max_edits") is None else "margin_edits"


def setting_of(row):
    """A row's (C, M, E), as decode_test takes it."""
    return tuple(row.get(key) for key in SETTING)


def choose(rows):
    """The row of lowest TER; ties to the smaller C, then no edit limit before a larger one,
    then the larger M (off below every margin).  None for no rows."""
    if not rows:
        return None
    return min(rows, key=lambda r: (round(r["ter"], 6), r["conservativeness"],
                                    -(math.inf if r.get("keep_mt_max_edits") is None else r["keep_mt_max_edits"]),
                                    -(-math.inf if r["keep_mt_margin"] is None else r["keep_mt_margin"])))


def tune(path, data, split, grid_c, grid_m, out, device="cpu", beam=5, max_len_b=200, grid_e=(None,)):
    """Decode `split` at every C, apply every M (with every E), write the grid and plot, return
    the choice."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    models, task = load(path, data, device)
    texts = read_triplets(data, split)
    scorer = Scorer(Path(data) / "tokenizer", texts["mt"], texts["pe"])
    baseline = scorer.score(texts["mt"])
    rows = []
    # An edit limit applies to the margin gate only, and not where it keeps every MT anyway.
    margin_settings = [(m, e) for m in grid_m for e in (grid_e if m is not None and m < math.inf else (None,))]
    for c in grid_c:
        edits = beam_pass(models, task, c, texts["src"], texts["mt"], beam, max_len_b)
        distances = mt_distances(edits) if any(e is not None for _, e in margin_settings) else None
        for m, e in margin_settings:
            outputs, kept = gated(edits, texts["mt"], m, e, distances)
            ter, bleu, effects = scorer.score(outputs)
            rows.append({"conservativeness": c, "keep_mt_margin": m, "keep_mt_max_edits": e,
                         "ter": ter, "bleu": bleu, "kept": kept,
                         **{k: effects[k] for k in ("modified", "improved", "deteriorated")}})
    best = choose(rows)
    chosen = {**{k: best[k] for k in SETTING}, "split": split, "ter": best["ter"],
              "do_nothing_ter": baseline[0], "checkpoint": str(path), "beam": beam, "max_len_b": max_len_b,
              # Each gate's own best, so that the gates can be compared on a split tuning never saw.
              "by_gate": {gate: {k: r[k] for k in (*SETTING, "ter")}
                          for gate, r in ((gate, choose([r for r in rows if gate_of(r) == gate]))
                                          for gate in GATES) if r is not None}}
    (out / "chosen.json").write_text(json.dumps(chosen, indent=1) + "\n")
    header = ["C", "M", "E", "TER", "BLEU", "modified", "improved", "deteriorated", "kept"]
    cells = [[f"{r['conservativeness']:g}", margin_name(r["keep_mt_margin"]), margin_name(r["keep_mt_max_edits"]),
              f"{r['ter']:.2f}", f"{r['bleu']:.2f}", str(r["modified"]),
              str(r["improved"]), str(r["deteriorated"]), str(r["kept"])] for r in rows]
    (out / "grid.tsv").write_text("\n".join("\t".join(c) for c in [header, *cells]) + "\n")
    name = setting_name(best["conservativeness"], best["keep_mt_margin"], best["keep_mt_max_edits"])
    md = [f"# Tuning on {split}: {len(texts['src'])} sentences, {path}, beam {beam}", "",
          f"Doing nothing: TER {baseline[0]:.2f}, BLEU {baseline[1]:.2f}. {scorer.spelling}. Chosen: "
          f"{name} (TER {best['ter']:.2f}). M: --keep-mt-margin (nats per token), E: --keep-mt-max-edits (word "
          "edits to the MT); off: not used.", "", table(header, cells)]
    (out / "grid.md").write_text("\n".join(md) + "\n")
    plot(rows, best, baseline[0], out / "tuning.png", split)
    return chosen


def plot(rows, best, do_nothing, path, split):
    """TER against C without a gate, and against the gate's margin at the chosen C (a line per
    edit limit), beside doing nothing; one legend below the panels, where it covers no curve.
    Returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    at_best_c = [r for r in rows if r["conservativeness"] == best["conservativeness"]]
    plain = [r for r in rows if r["keep_mt_margin"] is None]
    off = next((r for r in plain if r["conservativeness"] == best["conservativeness"]), None)
    # The gate's panel, where it was tried: TER against its finite margins at the chosen C.
    gated_rows = [r for r in at_best_c if r["keep_mt_margin"] is not None and math.isfinite(r["keep_mt_margin"])]
    panels = 2 if gated_rows else 1
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), sharey=True, squeeze=False)
    by_c = axes[0, 0]
    by_c.plot([r["conservativeness"] for r in plain], [r["ter"] for r in plain], "o-", label="post-edits, no gate")
    by_c.set_xlabel("conservativeness C (nats per novel token)")
    by_c.set_ylabel(f"TER on {split} (lower is better)")
    if gated_rows:
        ax, key = axes[0, 1], "keep_mt_margin"
        # One line per edit limit E.
        limits = sorted({r.get("keep_mt_max_edits") for r in gated_rows}, key=lambda e: math.inf if e is None else e)
        for e in limits:
            line = [r for r in gated_rows if r.get("keep_mt_max_edits") == e]
            ax.plot([r[key] for r in line], [r["ter"] for r in line], "o-", markersize=3 if len(limits) > 1 else 6,
                    label=f"post-edits, C = {best['conservativeness']:g}"
                          + ("" if len(limits) == 1 else ", no edit limit" if e is None else f", E = {e}"))
        if off is not None:
            ax.axhline(off["ter"], color="tab:green", linestyle=":", label="no gate")
        ax.set_xlabel("keep-the-MT margin M (nats per token)")
    for ax in axes[0]:
        ax.axhline(do_nothing, color="grey", linestyle="--", label="doing nothing (MT as is)")
        ax.grid(alpha=0.3)
    legend = {}
    for ax in axes[0]:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(text, handle)
    fig.suptitle(f"Choosing C and the gate on {split}: "
                 f"{setting_name(*setting_of(best))}")
    columns = min(len(legend), 3)
    fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=columns, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(legend) / columns) + 0.02, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fig


def decode_test(path, data, split, settings, out, trained=None, device="cpu", beam=5, max_len_b=200):
    """Outputs of `split` for each named (C, M, E) (``setting_of``), one beam pass per
    distinct C; writes NAME.txt for each and results.json (settings, kept, the training totals)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    models, task = load(path, data, device)
    texts = read_triplets(data, split)
    passes, distances, runs = {}, {}, {}
    for name, setting in settings.items():
        c, m, e = setting
        if c not in passes:
            passes[c] = beam_pass(models, task, c, texts["src"], texts["mt"], beam, max_len_b)
        if e is not None and c not in distances:
            distances[c] = mt_distances(passes[c])
        outputs, kept = gated(passes[c], texts["mt"], m, e, distances.get(c))
        (out / f"{name}.txt").write_text("".join(line + "\n" for line in outputs), encoding="utf-8")
        runs[name] = {"conservativeness": c, "keep_mt_margin": m, "keep_mt_max_edits": e, "kept": kept}
    (out / "results.json").write_text(json.dumps({"split": split, "checkpoint": str(path), "beam": beam,
                                                  "max_len_b": max_len_b, "runs": runs, "trained": trained},
                                                 indent=1) + "\n")
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", required=True,
                        help="the trained ape checkpoint, or an ensemble as fairseq-generate takes it (a.pt:b.pt)")
    parser.add_argument("--data", type=Path, required=True, help="its DATA_DIR (raw triplets and tokenizer/)")
    parser.add_argument("--split", default="valid", help="the split tuned on (never the one reported)")
    parser.add_argument("--out", type=Path, required=True, help="where grid, choice and plot go")
    parser.add_argument("--conservativeness", type=float, nargs="+", default=DEFAULT_CONSERVATIVENESS,
                        help="values of C tried (one beam pass each)")
    parser.add_argument("--keep-mt-margin", nargs="+", default=[margin_name(m) for m in DEFAULT_MARGINS],
                        help="values of M tried ('off': no gate; 'inf': keep every MT)")
    parser.add_argument("--keep-mt-max-edits", nargs="+", default=[margin_name(e) for e in DEFAULT_MAX_EDITS],
                        help="values of E tried with every finite M (word edits between post-edit and MT; 'off': "
                             "no limit)")
    parser.add_argument("--beam", type=int, default=5, help="beam size")
    parser.add_argument("--max-len-b", type=int, default=200,
                        help="longest post-edit in tokens, as fairseq-generate's --max-len-b (default: %(default)s)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args(argv)
    for c in args.conservativeness:
        try:
            check_decoding_options(c, None)
        except ValueError as e:
            parser.error(str(e))
    chosen = tune(args.path, args.data, args.split, args.conservativeness, parse_margins(args.keep_mt_margin),
                  args.out, args.device, args.beam, args.max_len_b, grid_e=parse_max_edits(args.keep_mt_max_edits))
    print((args.out / "grid.md").read_text())
    print(json.dumps(chosen))


if __name__ == "__main__":
    main()
