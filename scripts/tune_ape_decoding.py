"""Choose --conservativeness (C) and --keep-mt-margin (M) for one trained APE checkpoint
on the dev split, by generation only (no retraining).

    python scripts/tune_ape_decoding.py --path CKPT --data DATA_DIR --out DIR [--split valid]
        [--conservativeness 0 0.5 1 2 4] [--keep-mt-margin off -0.5 0 0.5 inf] [--beam 5]

Each C costs one beam pass over the split, in which the gate scores every MT but
keeps none (M = -inf); every M is then applied to those scores with the gate's own
rule (``fairseq_sparse.ape.decoding.keeps_mt``), so the grid's outputs are those
``fairseq-generate --conservativeness C --keep-mt-margin M`` gives (``--nbest 1``).
The pair with the lowest TER wins (ties: the smaller C, then the larger M).

Writes DIR/grid.md and grid.tsv (TER, BLEU, modified, improved, deteriorated and kept
for every C x M), DIR/chosen.json, and DIR/tuning.png: TER against C without the
gate, and against M at the chosen C, with doing nothing as a line.  Scoring is as
in ape_experiment.py: TER (tercom settings) and BLEU ``-tok none`` with sacrebleu;
with an uncased BERT every text (doing nothing included) on that BERT's spelling.
"""

import argparse
import json
import math
from pathlib import Path

import fairseq_sparse

fairseq_sparse.load_plugin()
from fairseq_sparse.ape.bert_dictionary import model_spelling  # noqa: E402
from fairseq_sparse.ape.decoding import check_decoding_options, keeps_mt  # noqa: E402
from fairseq_sparse.ape.postedit import PostEditor  # noqa: E402
from fairseq_sparse.ape.ter import ape_scores, edit_effects  # noqa: E402
from fairseq_sparse.ape.triplets import read_triplets  # noqa: E402
from fairseq_sparse.modules.bert import load_bert_tokenizer  # noqa: E402

DEFAULT_CONSERVATIVENESS = [0.0, 0.5, 1.0, 2.0, 4.0]
DEFAULT_MARGINS = [None, -0.5, -0.25, 0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, math.inf]


def parse_margins(values):
    """'off' is no gate (None); anything else a float, NaN refused as the task refuses it."""
    margins = []
    for value in values:
        if str(value).lower() == "off":
            margins.append(None)
            continue
        try:
            margin = float(value)
        except ValueError:
            raise SystemExit(f"--keep-mt-margin {value}: not a number or 'off'") from None
        try:
            check_decoding_options(0.0, margin)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        margins.append(margin)
    return margins


def margin_name(margin):
    return "off" if margin is None else f"{margin:g}"


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

    def score(self, hyps):
        """(TER, BLEU, edit effects) of one output per reference."""
        hyps = self.spell(hyps)
        ter, _, bleu, _ = ape_scores(hyps, self.refs)
        return ter, bleu, edit_effects(hyps, self.mts, self.refs)


def beam_pass(models, task, conservativeness, src, mt, beam, max_len_b=200):
    """One beam pass with conservativeness C; the gate scores each MT but keeps none."""
    editor = PostEditor(models, task, beam=beam, max_len_b=max_len_b, conservativeness=conservativeness,
                        keep_mt_margin=-math.inf)
    return editor.postedits(src, mt)


def gated(edits, mts, margin):
    """(outputs, how many are the MT) of one beam pass under the gate with this margin."""
    outputs, kept = [], 0
    for edit, mt in zip(edits, mts, strict=True):
        keep = edit.is_mt or (margin is not None and keeps_mt(edit.score, edit.mt_score, margin))
        outputs.append(mt if keep else edit.text)
        kept += keep
    return outputs, kept


def load(path, data, device):
    editor = PostEditor.from_checkpoint(path, data=data, device=device, beam=1)
    return editor.models, editor.task


def tune(path, data, split, grid_c, grid_m, out, device="cpu", beam=5, max_len_b=200):
    """Decode `split` at every C, apply every M, write the grid and plot, return the choice."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    models, task = load(path, data, device)
    texts = read_triplets(data, split)
    scorer = Scorer(Path(data) / "tokenizer", texts["mt"], texts["pe"])
    baseline = scorer.score(texts["mt"])
    rows = []
    for c in grid_c:
        edits = beam_pass(models, task, c, texts["src"], texts["mt"], beam, max_len_b)
        for m in grid_m:
            outputs, kept = gated(edits, texts["mt"], m)
            ter, bleu, effects = scorer.score(outputs)
            rows.append({"conservativeness": c, "keep_mt_margin": m, "ter": ter, "bleu": bleu, "kept": kept,
                         **{k: effects[k] for k in ("modified", "improved", "deteriorated")}})
    # Lowest TER; ties to the smaller C, then the larger M (off below every margin).
    best = min(rows, key=lambda r: (round(r["ter"], 6), r["conservativeness"],
                                    -(-math.inf if r["keep_mt_margin"] is None else r["keep_mt_margin"])))
    chosen = {"conservativeness": best["conservativeness"], "keep_mt_margin": best["keep_mt_margin"],
              "split": split, "ter": best["ter"], "do_nothing_ter": baseline[0], "checkpoint": str(path),
              "beam": beam, "max_len_b": max_len_b}
    (out / "chosen.json").write_text(json.dumps(chosen, indent=1) + "\n")
    header = ["C", "M", "TER", "BLEU", "modified", "improved", "deteriorated", "kept"]
    cells = [[f"{r['conservativeness']:g}", margin_name(r["keep_mt_margin"]), f"{r['ter']:.2f}", f"{r['bleu']:.2f}",
              str(r["modified"]), str(r["improved"]), str(r["deteriorated"]), str(r["kept"])] for r in rows]
    (out / "grid.tsv").write_text("\n".join("\t".join(c) for c in [header, *cells]) + "\n")
    md = [f"# Tuning on {split}: {len(texts['src'])} sentences, {path}, beam {beam}", "",
          f"Doing nothing: TER {baseline[0]:.2f}, BLEU {baseline[1]:.2f}. {scorer.spelling}. Chosen: "
          f"C = {best['conservativeness']:g}, M = {margin_name(best['keep_mt_margin'])} (TER {best['ter']:.2f}).", "",
          "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    md += ["| " + " | ".join(c) + " |" for c in cells]
    (out / "grid.md").write_text("\n".join(md) + "\n")
    plot(rows, best, baseline[0], out / "tuning.png", split)
    return chosen


def plot(rows, best, do_nothing, path, split):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_c, by_m) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    plain = [r for r in rows if r["keep_mt_margin"] is None]
    by_c.plot([r["conservativeness"] for r in plain], [r["ter"] for r in plain], "o-", label="post-edits, no gate")
    by_c.set_xlabel("conservativeness C (nats per novel token)")
    by_c.set_ylabel(f"TER on {split} (lower is better)")
    at_c = [r for r in rows if r["conservativeness"] == best["conservativeness"]
            and r["keep_mt_margin"] is not None and math.isfinite(r["keep_mt_margin"])]
    by_m.plot([r["keep_mt_margin"] for r in at_c], [r["ter"] for r in at_c], "o-",
              label=f"post-edits, C = {best['conservativeness']:g}")
    off = next((r for r in rows if r["conservativeness"] == best["conservativeness"] and r["keep_mt_margin"] is None),
               None)
    if off is not None:
        by_m.axhline(off["ter"], color="tab:green", linestyle=":", label="no gate")
    by_m.set_xlabel("keep-the-MT margin M (nats per token)")
    for ax in (by_c, by_m):
        ax.axhline(do_nothing, color="grey", linestyle="--", label="doing nothing (MT as is)")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(f"Choosing C and M on {split}: C = {best['conservativeness']:g}, "
                 f"M = {margin_name(best['keep_mt_margin'])}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def decode_test(path, data, split, settings, out, trained=None, device="cpu", beam=5, max_len_b=200):
    """Outputs of `split` for each named (C, M), one beam pass per distinct C; writes
    NAME.txt for each and results.json (settings, kept, the training totals)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    models, task = load(path, data, device)
    texts = read_triplets(data, split)
    passes, runs = {}, {}
    for name, (c, m) in settings.items():
        if c not in passes:
            passes[c] = beam_pass(models, task, c, texts["src"], texts["mt"], beam, max_len_b)
        outputs, kept = gated(passes[c], texts["mt"], m)
        (out / f"{name}.txt").write_text("".join(line + "\n" for line in outputs), encoding="utf-8")
        runs[name] = {"conservativeness": c, "keep_mt_margin": m, "kept": kept}
    (out / "results.json").write_text(json.dumps({"split": split, "checkpoint": str(path), "beam": beam,
                                                  "max_len_b": max_len_b, "runs": runs, "trained": trained},
                                                 indent=1) + "\n")
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", type=Path, required=True, help="the trained ape checkpoint")
    parser.add_argument("--data", type=Path, required=True, help="its DATA_DIR (raw triplets and tokenizer/)")
    parser.add_argument("--split", default="valid", help="the split tuned on (never the one reported)")
    parser.add_argument("--out", type=Path, required=True, help="where grid, choice and plot go")
    parser.add_argument("--conservativeness", type=float, nargs="+", default=DEFAULT_CONSERVATIVENESS,
                        help="values of C tried (one beam pass each)")
    parser.add_argument("--keep-mt-margin", nargs="+", default=[margin_name(m) for m in DEFAULT_MARGINS],
                        help="values of M tried ('off': no gate; 'inf': keep every MT)")
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
                  args.out, args.device, args.beam, args.max_len_b)
    print((args.out / "grid.md").read_text())
    print(json.dumps(chosen))


if __name__ == "__main__":
    main()
