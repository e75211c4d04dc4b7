"""Softmax vs 1.5-entmax vs alpha-entmax transformers on Multi30k en-de, side by side
(``scripts/multi30k_sparse_attention.py`` is its command line).

:func:`run` trains one ``entmax_transformer`` per attention normaliser with identical
settings and seed (keeping every epoch's checkpoint), translates ``test_2016_flickr``
and each ``--test-prefix`` set (beam 5) and writes ``results.md``:

- BLEU of the detokenised output against the raw references (sacrebleu, with its signature);
- updates, training wall time and tokens per second (fairseq's ``wps``, mean over epochs)
  relative to softmax, same run;
- each model's best validation loss and what ended its training (its plateau under
  ``--patience``, its epoch cap or its time cap), with the validation loss of every epoch
  plotted in ``validation_loss.png``;
- attention density per site (fraction of allowed keys with nonzero weight, valid split)
  and the Jensen-Shannon diversity of the heads of each layer, for every model;
- mean learned alpha per site, how far training moved any head's alpha from its
  initialisation, and the full attention report of the alpha-entmax model, with the
  alpha trajectories of every head across the epoch checkpoints.

Run again on the same ``--out``, each training resumes from its last checkpoint (a
finished one trains nothing, one stopped at its plateau by ``--patience`` is not
restarted) and everything is evaluated again.
"""

import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import sacrebleu
import torch

from ..configs import check
from ..entmax import HeadAlpha
from ..experiments import (FAIRSEQ_GENERATE, FAIRSEQ_PREPROCESS, FAIRSEQ_TRAIN, PLUGIN_DIR, device_name,
                           generate_hypotheses)
from ..markdown import table as markdown_table
from ..text import read_lines
from .stats import per_head, pool_by_site

# The attention report as a module of this interpreter, as fairseq's commands (experiments.py).
ATTENTION_REPORT = [sys.executable, "-m", "fairseq_sparse.sparse_transformer.report"]
NORMALIZERS = ("softmax", "entmax15", "alpha_entmax")


@dataclass(frozen=True)
class Multi30kConfig:
    """The experiment's options (``scripts/multi30k_sparse_attention.py`` builds its parser from them)."""

    out: Path = field(default=Path("outputs/multi30k"), metadata={
        "help": "data, checkpoints, tensorboard logs, the alpha-entmax attention report and results.md"})
    data: Optional[Path] = field(default=None, metadata={"help": "binarized data (default: prepare it under OUT/data)"})
    max_epoch: int = field(default=4, metadata={"help": "training epochs per model", "least": 1})
    dim: int = field(default=128, metadata={"help": "embedding width; feed-forward 2x"})
    layers: int = field(default=2, metadata={"help": "encoder and decoder layers"})
    heads: int = field(default=4, metadata={"help": "attention heads per layer"})
    max_tokens: int = field(default=4096, metadata={
        "help": "tokens a batch (fairseq's --max-tokens); fewer make more updates an epoch, and so more reach for "
                "the alphas", "least": 1})
    device: str = field(default="cpu", metadata={"help": "train and translate on CPU or on the (first) CUDA GPU",
                                                 "choices": ("cpu", "cuda")})
    normalizers: tuple[str, ...] = field(default=NORMALIZERS, metadata={
        "help": "attention normalisers to compare, one model each", "choices": NORMALIZERS})
    jobs: int = field(default=1, metadata={"help": "models trained at the same time", "least": 1})
    stop_time_hours: Optional[float] = field(default=None, metadata={
        "help": "also stop each training after this wall time"})
    patience: Optional[int] = field(default=None, metadata={
        "help": "also stop each training when its validation loss has not improved for this many epochs (fairseq's "
                "--patience); a model so stopped is not trained again", "least": 1})
    test_prefix: tuple[str, ...] = field(default=(), metadata={
        "help": "also translate and score the raw test set PREFIX.en / PREFIX.de (repeatable), e.g. another "
                "Multi30k test year", "repeat": True, "metavar": "PREFIX"})
    seed: int = field(default=1, metadata={"help": "training seed, the same for every model"})
    alpha_lr_scale: float = field(default=1.0, metadata={
        "help": "the alpha-entmax heads' alpha learning rate as a multiple of the model's (entmax_transformer's "
                "--alpha-lr-scale; 1: the paper's)"})
    speed_updates: int = field(default=0, metadata={
        "help": "measure training tokens/s apart: each model trains this many updates alone, before the runs, once "
                "(0: the runs' own mean over epochs)", "least": 0})
    speed_rounds: int = field(default=2, metadata={
        "help": "rounds of that measurement, the normalisers in a rotated order each", "least": 1})

    def __post_init__(self):
        check(self)
SITES = ("encoder", "decoder", "cross")
# The training schedule: Adam at a peak learning rate of LR, warmed up from 0 over WARMUP
# updates, then inverse square root (fairseq's inverse_sqrt).
LR, WARMUP = 1e-3, 400


def run_command(cmd, **kw):
    """Run a command line, echoed first; stop if it fails."""
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def model_arguments(data, normalizer, args):
    """fairseq-train's data, model, objective and optimiser arguments: the same for every
    normaliser, and for its training and its speed measurement."""
    scale = ["--alpha-lr-scale", args.alpha_lr_scale] if args.alpha_lr_scale != 1.0 else []
    return [*FAIRSEQ_TRAIN, data, "--user-dir", PLUGIN_DIR, "--task", "translation",
            "--arch", "entmax_transformer", "--attention-normalizer", normalizer, *scale,
            "--encoder-layers", args.layers, "--decoder-layers", args.layers,
            "--encoder-embed-dim", args.dim, "--decoder-embed-dim", args.dim,
            "--encoder-ffn-embed-dim", 2 * args.dim, "--decoder-ffn-embed-dim", 2 * args.dim,
            "--encoder-attention-heads", args.heads, "--decoder-attention-heads", args.heads,
            "--share-all-embeddings", "--dropout", "0.2", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", LR,
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", WARMUP, "--max-tokens", args.max_tokens,
            "--seed", args.seed, *device_flags(args), "--num-workers", "0"]


def train_command(data, out, normalizer, args):
    save = out / normalizer
    save.mkdir(parents=True, exist_ok=True)
    limit = ["--stop-time-hours", args.stop_time_hours] if args.stop_time_hours else []
    if args.patience:
        limit += ["--patience", args.patience]
    return [*model_arguments(data, normalizer, args), "--max-epoch", args.max_epoch, *limit,
            # Every epoch's checkpoint is kept: they are the alpha trajectories' points.
            "--save-dir", save, "--tensorboard-logdir", out / "tensorboard" / normalizer,
            "--log-format", "json", "--log-file", save / "train.log"]


def measure_speed(data, out, args):
    """{normaliser: [training tokens/s, one per round]}: each model trained ``--speed-updates``
    updates from its initialisation, alone on the device, the normalisers in a rotated order
    each round (so that a drift of the machine's speed falls on all of them).  Kept in
    OUT/speed.json and reused while the measurement's settings are the same."""
    record, settings = out / "speed.json", {"updates": args.speed_updates, "rounds": args.speed_rounds,
                                            "normalizers": list(args.normalizers)}
    if record.exists():
        kept = json.loads(record.read_text(encoding="utf-8"))
        if kept["settings"] == settings:
            return kept["tokens_per_second"]
    speeds = {n: [] for n in args.normalizers}
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.speed_rounds):
            for normalizer in args.normalizers[r % len(args.normalizers):] + args.normalizers[:r % len(args.normalizers)]:
                log = Path(scratch) / f"{normalizer}{r}.log"
                run_command([*model_arguments(data, normalizer, args), "--max-update", args.speed_updates,
                     "--disable-validation", "--no-save", "--save-dir", Path(scratch) / "save",
                     "--log-format", "json", "--log-file", log], stdout=subprocess.DEVNULL)
                summaries = epoch_summaries(log)
                speeds[normalizer].append(float(summaries[max(summaries)]["train_wps"]))
    record.write_text(json.dumps({"settings": settings, "tokens_per_second": speeds}, indent=1) + "\n",
                      encoding="utf-8")
    return speeds


EARLY_STOP = "early stop since valid performance hasn't improved"
STOPPED_EARLY = "stopped_early"


def stopped_early(save):
    """Whether the run in ``save`` ended at its validation plateau (--patience), as fairseq's
    log says (the log, not the checkpoint's --patience count of compat.train_runs, so that
    runs whose checkpoints predate that count are told too)."""
    marker = save / STOPPED_EARLY
    if not marker.exists() and (save / "train.log").exists():
        if EARLY_STOP in (save / "train.log").read_text(encoding="utf-8"):
            marker.write_text("fairseq-train stopped at its validation plateau (--patience)\n", encoding="utf-8")
    return marker.exists()


def train_all(data, out, args):
    """Train one model per normaliser, ``--jobs`` at a time (concurrent runs share the
    device, so their tokens/s are only comparable with each other).  A model that has
    stopped at its plateau is not trained again; any other resumes from its last checkpoint."""
    commands = [train_command(data, out, n, args) for n in args.normalizers
                if not stopped_early(out / n)]
    for start in range(0, len(commands), args.jobs):
        batch = commands[start:start + args.jobs]
        procs = []
        for cmd in batch:
            print("+", " ".join(map(str, cmd)), flush=True)
            procs.append(subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL))
        for cmd, proc in zip(batch, procs):
            log = Path(cmd[cmd.index("--log-file") + 1])
            if proc.wait() != 0:
                raise SystemExit(f"training failed ({proc.returncode}): see {log}")
            stopped_early(log.parent)


def epoch_records(log, key):
    """{epoch: fairseq's last record holding ``key``} of a ``--log-format json`` log.  One per
    epoch, however often a line was written: a rerun of a finished experiment resumes (trains
    nothing) and appends to the earlier log."""
    epochs = {}
    for line in Path(log).read_text(encoding="utf-8").splitlines():
        if f'"{key}"' in line:
            record = json.loads(line[line.index("{"):])
            epochs[int(record["epoch"])] = record
    return epochs


def epoch_summaries(log):
    """{epoch: fairseq's end-of-epoch training record} of a ``--log-format json`` log."""
    return epoch_records(log, "train_wps")


def validation_losses(log):
    """{epoch: validation loss in bits} of a ``--log-format json`` log."""
    return {epoch: float(r["valid_loss"]) for epoch, r in epoch_records(log, "valid_loss").items()}


def training_seconds(save):
    """The run's training time in ``save``: fairseq's cumulative training time (the clock that
    --stop-time-hours reads), as its last checkpoint keeps it across resumptions.  The logs'
    ``train_wall`` restarts at every resumption."""
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    return float(state["extra_state"]["previous_training_time"])


def ended_by(save, epochs, max_epoch, stop_time_hours=None):
    """What ended the training in ``save``: its validation plateau; else its wall-time cap if
    its training clock is past ``stop_time_hours`` (the cap may fall in the last epoch); else
    its epoch cap if it trained ``max_epoch`` epochs; else the wall-time cap, checked before an
    epoch by fairseq_sparse.compat.train_runs.  A run that failed raised before this is asked."""
    if stopped_early(save):
        return "plateau (--patience)"
    if stop_time_hours and training_seconds(save) >= 3600 * stop_time_hours:
        return "time cap (--stop-time-hours)"
    return "epoch cap" if epochs >= max_epoch else "time cap (--stop-time-hours)"


def plot_validation_loss(curves, path):
    """Validation loss per epoch of each model (left), and the second half of the epochs at
    their own scale (right), where a plateau shows; the best epoch of each is marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    last = max(max(c) for c in curves.values())
    for normalizer, losses in curves.items():
        epochs = sorted(losses)
        best = min(epochs, key=losses.get)
        for ax, start in zip(axes, (1, max(1, last // 2))):
            shown = [e for e in epochs if e >= start]
            (line,) = ax.plot(shown, [losses[e] for e in shown], marker="o", markersize=2.5, label=normalizer)
            if best >= start:
                ax.plot([best], [losses[best]], "*", markersize=11, color=line.get_color())
    for ax, title in zip(axes, ("every epoch", "the second half (best epoch: star)")):
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("validation loss (bits)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def training_summary(out, normalizer):
    """(best checkpoint, mean training tokens/s over epochs, epochs trained, updates, training
    wall seconds)."""
    save = out / normalizer
    epochs = epoch_summaries(save / "train.log")
    last = epochs[max(epochs)]
    return (save / "checkpoint_best.pt", statistics.mean(float(r["train_wps"]) for r in epochs.values()), len(epochs),
            int(float(last["train_num_updates"])), training_seconds(save))


def checkpoint_epoch(path):
    """The epoch of a checkpoint{epoch}.pt file."""
    return int(path.stem[len("checkpoint"):])


def epoch_checkpoints(save):
    """The run's checkpoint{epoch}.pt files, in epoch order."""
    return sorted(save.glob("checkpoint[0-9]*.pt"), key=checkpoint_epoch)


def binarize_test_set(prefix, data, out, src="en", tgt="de"):
    """A raw test set PREFIX.en / PREFIX.de encoded with the experiment's sentencepiece model
    and binarized with its dictionaries under OUT/tests/NAME; returns (binarized directory,
    raw references)."""
    import sentencepiece as spm

    model = data.parent / "spm.model"
    if not model.exists():
        raise SystemExit(f"--test-prefix {prefix}: no sentencepiece model next to --data ({model}); give the "
                         "directory data_prep/multi30k.sh prepared")
    files = [Path(f"{prefix}.{lang}") for lang in (src, tgt)]
    for f in files:
        if not f.is_file():
            raise SystemExit(f"--test-prefix {prefix}: {f} not found")
    texts = [list(read_lines(f)) for f in files]
    if len(texts[0]) != len(texts[1]):
        raise SystemExit(f"--test-prefix {prefix}: {files[0]} has {len(texts[0])} lines, {files[1]} {len(texts[1])}")
    target = out / "tests" / files[0].stem
    target.mkdir(parents=True, exist_ok=True)
    sp = spm.SentencePieceProcessor(model_file=str(model))
    for lang, lines in zip((src, tgt), texts):
        pieces = sp.encode(lines, out_type=str)
        (target / f"test.spm.{lang}").write_text("".join(" ".join(x) + "\n" for x in pieces), encoding="utf-8")
    # Rebuilt on every run, so that it always holds the files as they are now (fairseq-preprocess
    # refuses a directory that holds its dictionaries already).
    bin_dir = target / "bin"
    shutil.rmtree(bin_dir, ignore_errors=True)
    run_command([*FAIRSEQ_PREPROCESS, "--source-lang", src, "--target-lang", tgt, "--testpref", target / "test.spm",
         "--destdir", bin_dir, "--srcdict", data / f"dict.{src}.txt", "--tgtdict", data / f"dict.{tgt}.txt",
         "--workers", "1"])
    return bin_dir, files[1]


def device_flags(args):
    return ["--cpu"] if args.device == "cpu" else []


def bleu(data, checkpoint, references, args):
    gen = subprocess.run(
        [*map(str, FAIRSEQ_GENERATE), str(data), "--user-dir", str(PLUGIN_DIR), "--path", str(checkpoint),
         "--gen-subset", "test", "--beam", "5", "--post-process", "sentencepiece", *device_flags(args),
         "--max-tokens", "8000"],
        check=True, capture_output=True, text=True).stdout
    hyps = generate_hypotheses(gen)
    refs = list(read_lines(references))
    # Should fairseq-generate leave a sentence out (it did, before compat/batching.py),
    # it is scored as an empty output and the count is reported, never dropped.
    missing = len(refs) - len(hyps)
    metric = sacrebleu.BLEU()
    score = metric.corpus_score([hyps.get(i, "") for i in range(len(refs))], [refs])
    return score.score, str(metric.get_signature()), missing


def attention_summary(checkpoint, data):
    """({site: (mean density, mean alpha, largest alpha change)}, {(site, layer): head diversity})
    on the validation split."""
    from .report import collect, load

    model, task = load(checkpoint, data)
    acc, _, _ = collect(model, task, "valid", 1014, set())
    density = per_head(acc, "density")
    learned, changes = model.head_alphas(), model.head_alpha_changes()
    densities, alphas, moves = (pool_by_site(v, SITES) for v in (density, learned, changes))
    by_site = {site: (statistics.mean(densities[site]), statistics.mean(alphas[site]), max(map(abs, moves[site])))
               for site in SITES}
    return by_site, {sl: a["diversity"] / a["queries"] for sl, a in acc.items()}


def learning_rate(n):
    """The learning rate fairseq's inverse_sqrt schedule sets after n updates (the rate of update n + 1)."""
    return LR * n / WARMUP if n < WARMUP else LR * math.sqrt(WARMUP / n)


def alpha_reach(save):
    """Per epoch checkpoint of an alpha-entmax run: (epoch, updates, Adam's bound on how far any head's
    alpha logit can have moved, the largest and the median logit moved, heads gone denser, heads).
    Adam's step is bounded by about its learning rate whatever the gradient (Kingma & Ba 2015, Sec. 2.1,
    with beta1 = 0.9 and beta2 = 0.98), so the bound is the schedule's sum of learning rates
    (times --alpha-lr-scale); a head near it moved as fast as Adam allows."""
    rows = []
    for checkpoint in epoch_checkpoints(save):
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        model_cfg = state["cfg"]["model"]
        alpha_min = float(getattr(model_cfg, "alpha_min", 1.01))
        scale = float(getattr(model_cfg, "alpha_lr_scale", 1.0) or 1.0)
        updates = int(state["optimizer_history"][-1]["num_updates"])
        moved, denser = [], 0
        for key, pre_alpha in state["model"].items():
            if not key.endswith("head_alpha.pre_alpha"):
                continue
            initial = state["model"][key[:-len("pre_alpha")] + "initial_alpha"]
            start = HeadAlpha.logit(initial, alpha_min)
            moved.append((scale * pre_alpha - start).abs())
            denser += int((scale * pre_alpha < start).sum())
        moved = torch.cat(moved)
        bound = scale * sum(learning_rate(n) for n in range(updates))
        rows.append((checkpoint_epoch(checkpoint), updates, bound, float(moved.max()),
                     float(moved.median()), denser, moved.numel()))
    return rows


def run(args):
    """The experiment on ``args`` (a :class:`Multi30kConfig` whose ``data`` is the binarized
    data, beside which data_prep/multi30k.sh left ``spm.model`` and ``test.raw.de``)."""
    references = args.data.parent / "test.raw.de"
    # Checked before any training: scoring needs them once every model has trained.
    if not references.is_file():
        raise SystemExit(f"--data {args.data}: no raw test references {references} beside it (data_prep/multi30k.sh "
                         "writes test.raw.de next to bin/); BLEU is scored on them after training")
    try:
        list(read_lines(references))
    except ValueError as e:
        raise SystemExit(f"--data {args.data}: {e}") from None
    args.out.mkdir(parents=True, exist_ok=True)

    extra = [binarize_test_set(prefix, args.data, args.out) for prefix in args.test_prefix]
    # Before training, so that no run of ours shares the device with it (kept, then reused).
    speeds = measure_speed(args.data, args.out, args) if args.speed_updates else None
    train_all(args.data, args.out, args)
    rows = {}
    for normalizer in args.normalizers:
        checkpoint, wps, epochs, updates, wall = training_summary(args.out, normalizer)
        score, signature, missing = bleu(args.data, checkpoint, references, args)
        others = [bleu(data, checkpoint, refs, args) for data, refs in extra]
        attention, diversity = attention_summary(checkpoint, args.data)
        losses = validation_losses(args.out / normalizer / "train.log")
        best = min(losses, key=losses.get)
        rows[normalizer] = dict(bleu=score, wps=wps, epochs=epochs, updates=updates, wall=wall, missing=missing,
                                others=others, attention=attention, diversity=diversity, losses=losses,
                                best=(losses[best], best),
                                ended=ended_by(args.out / normalizer, epochs, args.max_epoch, args.stop_time_hours))
    plot_validation_loss({n: r["losses"] for n, r in rows.items()}, args.out / "validation_loss.png")
    if "alpha_entmax" in rows:
        save = args.out / "alpha_entmax"
        run_command([*ATTENTION_REPORT, "--path", save / "checkpoint_best.pt", "--data", args.data,
             "--out", args.out / "alpha_entmax_report", "--sentences", "0", "1", "2",
             "--trajectory", *epoch_checkpoints(save)])

    limit = f" (or {args.stop_time_hours} h each)" if args.stop_time_hours else ""
    plateau = f", stopped after {args.patience} epochs without a better validation loss" if args.patience else ""
    together = f"; {args.jobs} trained at a time on the one device" if args.jobs > 1 else ""
    base_name = "softmax" if "softmax" in rows else args.normalizers[0]
    if speeds:  # the median over rounds of each round's ratio to the baseline, and the median rate
        for normalizer, r in rows.items():
            r["speed"] = (statistics.median(a / b for a, b in zip(speeds[normalizer], speeds[base_name])),
                          statistics.median(speeds[normalizer]))
        speed_note = (f" Tokens/s: each model alone for {args.speed_updates} updates from its initialisation, "
                      f"median of {args.speed_rounds} rounds.")
    else:
        for normalizer, r in rows.items():
            r["speed"] = (r["wps"] / rows[base_name]["wps"], r["wps"])
        speed_note = " Tokens/s: the training runs' own, mean over epochs" + (
            " (trained side by side, so comparable with each other only)." if args.jobs > 1 else ".")

    def per_site(values, fmt):
        # NaN: a checkpoint written before the initial alphas were kept.
        return " / ".join(fmt.format(v) if v == v else "unknown" for v in values)

    lines = [
        "# Multi30k en-de: softmax vs 1.5-entmax vs alpha-entmax attention", "",
        f"Model: entmax_transformer, {args.layers}+{args.layers} layers, {args.dim} wide, {args.heads} heads, "
        f"shared embeddings, sentencepiece 8k, {args.max_tokens} tokens a batch; at most {args.max_epoch} epochs"
        f"{limit}{plateau}, seed {args.seed}, "
        f"{device_name(args.device, args.jobs)}{together}. Test: test_2016_flickr, beam 5; density and diversity on the "
        "validation split." + speed_note, "",
        f"sacrebleu signature: `{signature}`", "",
        markdown_table(
            ["attention", "BLEU", "epochs", f"train tokens/s vs {base_name}", "updates", "training wall time",
             "best validation loss (epoch)", "ended by", "density enc / dec / cross", "mean alpha enc / dec / cross",
             "largest alpha change since initialisation enc / dec / cross"],
            [[normalizer, f"{r['bleu']:.2f}", r["epochs"], f"{r['speed'][0]:.2f} ({r['speed'][1]:.0f} tok/s)",
              r["updates"], f"{r['wall'] / 60:.1f} min", f"{r['best'][0]:.3f} ({r['best'][1]})", r["ended"],
              per_site([r["attention"][s][0] for s in SITES], "{:.3f}"),
              per_site([r["attention"][s][1] for s in SITES], "{:.2f}"),
              per_site([r["attention"][s][2] for s in SITES], "{:.3f}")] for normalizer, r in rows.items()]),
    ]
    lines += ["", "Validation loss per epoch, the best epoch starred (the checkpoint scored above): "
              "![validation loss per epoch](validation_loss.png)"]
    if extra:
        lines += ["", "BLEU on the other test sets (same checkpoints, beam 5):", "",
                  markdown_table(["attention", *(Path(prefix).name for prefix in args.test_prefix)],
                                 [[n, *(f"{o[0]:.2f}" for o in r["others"])] for n, r in rows.items()])]
    layers = sorted(next(iter(rows.values()))["diversity"], key=lambda sl: (SITES.index(sl[0]), sl[1]))
    lines += ["", "Head diversity per layer (Jensen-Shannon divergence between the heads, mean over queries; "
              f"0: alike, log {args.heads} = {math.log(args.heads):.3f}: disjoint):", "",
              markdown_table(["site", "layer", *rows],
                             [[s, layer, *(f"{r['diversity'][(s, layer)]:.3f}" for r in rows.values())]
                              for s, layer in layers])]
    for normalizer, r in rows.items():
        for name, (_, _, missing) in [("test_2016_flickr", (None, None, r["missing"])),
                                      *zip((Path(x).name for x in args.test_prefix), r["others"])]:
            if missing:
                lines.append(f"\n{normalizer}: fairseq-generate gave no output for {missing} sentences of {name} "
                             "(scored as empty).")
    if "alpha_entmax" in rows:
        reach = alpha_reach(args.out / "alpha_entmax")
        lines += ["", "How far the alphas could move: Adam's step is bounded by about its learning rate, so after U updates "
                  "no head's alpha logit a (alpha = alpha_min + (2 - alpha_min) sigmoid(a)) can have moved more than "
                  "the schedule's summed learning rate; a head near that bound moved as fast as the optimiser "
                  "allows.", "",
                  markdown_table(["epoch checkpoint", "updates", "bound on the logit's move", "largest move",
                                  "median move", "heads gone denser"],
                                 [[epoch, u, f"{b:.3g}", f"{top:.3g} ({top / b:.2f} of the bound)" if b else f"{top:.3g}",
                                   f"{mid:.3g}", f"{d} of {n}"]
                                  for epoch, u, b, top, mid, d, n in reach])]
        lines += ["", "Alpha-entmax attention report (alpha histograms and bimodality, trajectories, head roles): "
                  "[alpha_entmax_report/report.md](alpha_entmax_report/report.md)"]
    (args.out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
