"""When does a bit-vector VAE's code collapse, and what comes first?
(``scripts/bitvector_dynamics.py`` is its command line.)

Reads ``fairseq-train`` logs of ``--task bitvector_vae`` written with a short
``--log-interval`` (``--log-format simple``), and follows over the updates what the
``latent_marginalization`` criterion logs every interval:

- ``decoder_calls``: codes decoded per image (for SparseMAP and top-k sparsemax, the
  size of q's support; 1 is a single code);
- ``code_entropy_bits``: the entropy of q per image, in bits (0: one deterministic
  code; the KL to the uniform prior is D minus this);
- ``score_shared`` and ``score_spread``: per bit, the |mean| and the standard deviation of
  its scores over a batch's images: the part every image shares, and the part that
  tells images apart (once the shared part is past the spread, every image sits on the
  same side of the band where a bit is fractional: one code for every image);
- ``gradient_alignment``: how alike the images' gradients in their scores are (1: every
  image is pushed the same way; about 1/64 for unrelated pushes at batch 64);
- ``positive_bits``: per image, the bits with a positive score (the ones of the most
  likely code; a budget of B ones binds once more than B are positive);
- ``neg_elbo_bits_per_dim`` and ``gnorm`` (the norm of the whole model's gradient).

It writes a table (per run: the first update at which q is down to one code per
image; q's entropy and the shared and spread parts of the scores at chosen updates;
the gradients' early alignment; the positive bits and codes at the end) and one plot
of these curves for all runs.
The logs come from ``latent_results.py`` or ``fairseq-train``, e.g.

    python scripts/latent_results.py --dataset mnist --experiments bitvector_vae/32 --estimators sparsemap \\
        --epochs '{"bitvector_vae": 1}' --nll-samples 8 --out DIR --fairseq-args "--log-interval 10"

A run label is the text before ``=`` (default: the log's name).
"""

import itertools
import math

from ..experiments import interval_metrics
from ..markdown import table as markdown_table

CURVES = (("decoder_calls", "codes decoded per image"), ("code_entropy_bits", "entropy of q (bits per image)"),
          ("score_shared", "scores: shared by the batch (solid), spread (dashed)"),
          ("gradient_alignment", "alignment of the images' score gradients"),
          ("neg_elbo_bits_per_dim", "training -ELBO (bits per dim)"), ("gnorm", "gradient norm (whole model)"))
REQUIRED = [name for name, _ in CURVES] + ["score_spread"]
# q is "down to one code per image" once its entropy is below this, in bits: for every
# estimator alike (the Monte Carlo ones decode a fixed number of samples, whatever q is).
ONE_CODE_BITS = 0.01


def read_run(label, path):
    entries = interval_metrics(path.read_text(encoding="utf-8"))
    # Not on every line: gradient_alignment is logged only while the encoder learns (--encoder-delay).
    missing = [name for name in REQUIRED if entries and not any(name in e for e in entries)]
    if not entries:
        raise SystemExit(f"{path}: no train_inner lines; train with --log-format simple and a --log-interval "
                         "below the updates per epoch")
    if missing:
        raise SystemExit(f"{path}: its interval lines lack {', '.join(missing)} (not a bitvector_vae log of "
                         "the latent_marginalization criterion, or one from before these metrics were logged)")
    return label, entries


def at_update(entries, update):
    """The logged entry at the last interval at or before ``update`` (None before the first)."""
    before = [e for e in entries if e["num_updates"] <= update]
    return before[-1] if before else None


def first_update(entries, condition):
    for entry in entries:
        if condition(entry):
            return int(entry["num_updates"])
    return None


def mean_over(entries, low, high, metric):
    values = [e[metric] for e in entries if low <= e["num_updates"] <= high and metric in e]
    return sum(values) / len(values) if values else None


def table(runs, updates, early):
    head = (["run", "updates", "first update with q's entropy under 0.01 bits"]
            + [f"entropy / shared / spread at {u}" for u in updates]
            + [f"gradient alignment, updates 1-{early}", "positive bits at the end", "codes per image at the end"])
    rows = []
    for label, entries in runs:
        row = [label, str(int(entries[-1]["num_updates"])),
               str(first_update(entries, lambda e: e["code_entropy_bits"] < ONE_CODE_BITS) or "never")]
        for u in updates:
            e = at_update(entries, u)
            row.append(f"{e['code_entropy_bits']:.2f} / {e['score_shared']:.2f} / {e['score_spread']:.2f}" if e else "–")
        alignment = mean_over(entries, 1, early, "gradient_alignment")
        row.append("–" if alignment is None else f"{alignment:.3f}")
        row.append(f"{entries[-1]['positive_bits']:.1f}" if "positive_bits" in entries[-1] else "–")
        row.append(f"{entries[-1]['decoder_calls']:.2f}")
        rows.append(row)
    return markdown_table(head, rows)


def plot(runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    legend_rows = math.ceil(len(runs) / 4)
    fig, axes = plt.subplots(2, 3, figsize=(15, 7 + 0.25 * legend_rows), sharex=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (metric, title) in zip(axes.flat, CURVES):
        for (label, entries), colour in zip(runs, itertools.cycle(colours)):
            steps = [e["num_updates"] for e in entries]
            ax.plot(steps, [e.get(metric, math.nan) for e in entries], label=label, lw=1.2, color=colour)
            if metric == "score_shared":
                ax.plot(steps, [e["score_spread"] for e in entries], lw=1.2, ls="--", color=colour)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_xscale("log")  # what decides a run happens in its first tens of updates
        if metric in ("score_shared", "gnorm", "decoder_calls"):
            ax.set_yscale("log")
        elif metric == "code_entropy_bits":
            ax.set_yscale("symlog", linthresh=ONE_CODE_BITS)
    for ax in axes[1]:
        ax.set_xlabel("update")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.035 * legend_rows, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args):
    """The experiment on ``args`` (the script's options, checked)."""
    runs = [read_run(label, path) for label, path in args.runs]
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(runs, args.updates, args.early)
    (args.out / "dynamics.md").write_text(text + "\n", encoding="utf-8")
    plot(runs, args.out / "dynamics.png")
    print(text)
