"""The estimator x experiment grid of Correia et al. (NeurIPS 2020), over seeds, through
fairseq-train; one table per experiment in the paper's format, next to its numbers,
and plots of decoder calls (the support size, for sparse marginalisation) and of the test
metric over training (``scripts/latent_results.py`` is its command line).

A run whose log already ends its training, at ``--epochs``, is collected, not rerun; one
logged with fewer epochs, or interrupted, is trained again, to the new count: from its
checkpoint with ``--keep-checkpoints``, its log appended to, otherwise from the start
(``--collect-only`` never trains, and collects every finished run).  Metrics are the
last epoch's on the test split; decoder calls are per training example, averaged over
all of training (as the paper counts them) and in the last epoch (where the support of
sparse marginalisation has shrunk).
"""

import argparse
import itertools
import json
import math
import shlex
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..configs import check
from ..experiments import FAIRSEQ_TRAIN, PLUGIN_DIR, epoch_metrics, job_env, run_logged, training_done
from ..markdown import mean_spread as markdown_mean_spread, table as markdown_table
from . import ESTIMATORS, BitVector, Categorical
from .images import FULL_MNIST

# The paper's numbers (Tables 1-3): ssvae accuracy, signaling-game success (both %),
# bit-vector VAE bits per dimension at D = 32 / 128; decoder calls where reported.
PAPER = {
    "ssvae": {"dense": 96.93, "sparsemax": 96.87, "sfe": 94.75, "sfe_plus": 96.53, "nvil": 96.01, "gumbel": 95.46},
    "signaling_game": {"dense": 93.37, "sparsemax": 93.35, "sfe": 33.05, "sfe_plus": 44.32, "nvil": 37.04,
                       "gumbel": 23.51, "st_gumbel": 27.42},
    "bitvector_vae/32": {"sfe": 3.74, "sfe_plus": 3.61, "nvil": 3.65, "gumbel": 3.57, "topk_sparsemax": 3.62,
                         "sparsemap": 3.72, "sparsemap_budget": 3.64},
    "bitvector_vae/128": {"sfe": 3.77, "sfe_plus": 3.59, "nvil": 3.60, "gumbel": 3.49, "topk_sparsemax": 3.61,
                          "sparsemap": 3.67, "sparsemap_budget": 3.66},
}
PAPER_CALLS = {"ssvae": {"dense": 10, "sparsemax": 1.01}, "signaling_game": {"dense": 256, "sparsemax": 3.13}}

# experiment -> (metric, higher is better, extra fairseq-train options)
EXPERIMENTS = {
    "ssvae": ("accuracy", True, ["--task", "ssvae", "--arch", "ssvae", "--lr", "1e-3"]),
    "signaling_game": ("success", True, ["--task", "signaling_game", "--arch", "signaling_game", "--lr", "1e-3"]),
    "bitvector_vae/32": ("nll_bits_per_dim", False, ["--task", "bitvector_vae", "--arch", "bitvector_vae",
                                                     "--latent-bits", "32", "--lr", "2e-3"]),
    "bitvector_vae/128": ("nll_bits_per_dim", False, ["--task", "bitvector_vae", "--arch", "bitvector_vae",
                                                      "--latent-bits", "128", "--lr", "2e-3"]),
}


# The experiments' families, each with its own epoch count (--epochs).
FAMILIES = ("ssvae", "signaling_game", "bitvector_vae")
DEFAULT_EPOCHS = 10


def _json(text):
    """--epochs' argparse type: a JSON value (a number, or an object per family)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None


@dataclass(frozen=True)
class LatentResultsConfig:
    """The grid's options (``scripts/latent_results.py`` builds its parser from them)."""

    out: Path = field(metadata={"help": "directory for logs, results.json, tables, plot", "required": True})
    experiments: tuple[str, ...] = field(default=tuple(EXPERIMENTS), metadata={
        "help": "experiments to run", "choices": tuple(EXPERIMENTS)})
    estimators: Optional[tuple[str, ...]] = field(default=None, metadata={
        "help": "only these (default: every one the experiment supports)"})
    seeds: int = field(default=3, metadata={
        "help": "runs per experiment and estimator: N seeds, from --first-seed on", "least": 1})
    first_seed: int = field(default=1, metadata={
        "help": "the first of the --seeds seeds, to add seeds to a grid run before", "least": 0})
    dataset: str = field(default="digits", metadata={
        "help": "images: scikit-learn's 8x8 digits (no download) or MNIST from --data", "choices": ("digits", "mnist")})
    data: Path = field(default=FULL_MNIST, metadata={
        "help": "MNIST-format directory for --dataset mnist", "shown": "the full MNIST, IDX files"})
    epochs: dict = field(default_factory=dict, metadata={
        "help": 'epochs of every experiment (a number), or per experiment as JSON, e.g. \'{"ssvae": 200}\'',
        "type": _json, "shown": f"{DEFAULT_EPOCHS} each"})
    batch_size: int = field(default=64, metadata={"help": "images per update", "least": 1})
    nll_samples: int = field(default=32, metadata={
        "help": "importance samples per image of the bit-vector VAE's NLL estimate", "least": 1})
    fairseq_args: str = field(default="", metadata={
        "help": 'more fairseq-train options for every run, overriding the defaults above (e.g. "--lr 5e-4 '
                '--latent-dim 10")'})
    warm_start_epochs: int = field(default=0, metadata={
        "help": "ssvae only: first train this many epochs on the labelled images alone (--labelled-only), then the "
                "whole objective from that checkpoint, as the paper's code does (100 there; 0: no warm start)",
        "least": 0})
    warm_start_lr: float = field(default=1e-3, metadata={"help": "Adam's learning rate in the warm start (the paper's)"})
    jobs: int = field(default=1, metadata={
        "help": "runs at the same time, each on its share of the cores unless OMP_NUM_THREADS is set", "least": 1})
    gpu: bool = field(default=False, metadata={"help": "train on the GPU (default: on the CPU)"})
    keep_checkpoints: bool = field(default=False, metadata={
        "help": "keep each run's last checkpoint, as OUT/checkpoints/RUN/checkpoint_last.pt where OUT/logs/RUN.log "
                "is its log (e.g. for scripts/bitvector_code_use.py; fairseq also keeps checkpoint_best.pt, best on "
                "the first --valid-subset); a run trained again goes on from it; default: save none"})
    tensorboard: bool = field(default=False, metadata={"help": "also write tensorboard logs under OUT"})
    collect_only: bool = field(default=False, metadata={"help": "tabulate the logs already in OUT; train nothing"})

    def __post_init__(self):
        check(self)
        epochs = self.epochs
        if isinstance(epochs, int) and not isinstance(epochs, bool):
            epochs = dict.fromkeys(FAMILIES, epochs)
        if not isinstance(epochs, dict):
            raise ValueError(f"--epochs {json.dumps(epochs)}: give a number, or a JSON object such as "
                             "'{\"ssvae\": 3}'")
        epochs = {**dict.fromkeys(FAMILIES, DEFAULT_EPOCHS), **epochs}
        for family, count in epochs.items():
            # fairseq-train reads --max-epoch 0 as no limit: a run that never ends.
            if family not in FAMILIES or not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ValueError(f"--epochs: {family!r}: {count!r}; give each of {', '.join(FAMILIES)} a whole "
                                 "number of epochs, at least 1")
        object.__setattr__(self, "epochs", epochs)
        if self.warm_start_epochs and "ssvae" not in self.experiments:
            raise ValueError("--warm-start-epochs applies to the ssvae experiment only")

    @property
    def cpu(self):
        return not self.gpu


def estimators_for(experiment):
    space = BitVector if experiment.startswith("bitvector_vae") else Categorical
    return sorted(name for name, cls in ESTIMATORS.items() if space in cls.spaces)


def parse_log(text):
    """Per-epoch training decoder calls, the last validation/test metrics of a log, and the
    test metrics of every validated epoch (``test_curve``)."""
    epochs = epoch_metrics(text)
    last = {subset: rows[-1] for subset, rows in epochs.items() if subset != "train"}
    return {"train_calls": [t.get("decoder_calls", math.nan) for t in epochs.get("train", [])], **last,
            "test_curve": epochs.get("test", [])}


def grid(args):
    """The runs to train or collect: experiment x estimator x seed, in that order."""
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    return [(experiment, estimator, seed) for experiment in args.experiments for estimator in estimators_for(experiment)
            if not args.estimators or estimator in args.estimators for seed in seeds]


def run_one(args, experiment, estimator, seed):
    name = f"{experiment.replace('/', '_d')}/{estimator}_seed{seed}"
    log = args.out / "logs" / f"{name}.log"
    warm_log = args.out / "logs" / f"{name}.warm.log"
    warm = experiment == "ssvae" and args.warm_start_epochs > 0
    # Collecting takes every finished run; training also goes on with one shorter than --epochs.
    if not training_done(log, None if args.collect_only else args.epochs[experiment.split("/")[0]]):
        if args.collect_only:
            return experiment, estimator, seed, None
        train(args, experiment, estimator, seed, name, log, warm_log if warm else None)
    parsed = parse_log(log.read_text(encoding="utf-8"))
    if warm:
        parsed["warm_start"] = parse_log(warm_log.read_text(encoding="utf-8"))
    return experiment, estimator, seed, parsed


def train(args, experiment, estimator, seed, name, log, warm_log):
    """One run through fairseq-train, its output in ``log`` as it goes; first, given a
    ``warm_log``, the warm start on the labelled images (ssvae)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = job_env(args.jobs)
    save_dir = args.out / "checkpoints" / name
    cmd = list(FAIRSEQ_TRAIN)
    if args.dataset == "mnist":
        cmd.append(str(args.data))
    cmd += ["--user-dir", str(PLUGIN_DIR), *EXPERIMENTS[experiment][2], "--dataset", args.dataset,
            "--criterion", "latent_marginalization", "--estimator", estimator, "--optimizer", "adam",
            "--batch-size", str(args.batch_size), "--seed", str(seed), "--valid-subset", "valid,test",
            "--num-workers", "0", "--log-format", "simple", "--log-interval", "1000"] + (["--cpu"] if args.cpu else [])
    if experiment.startswith("bitvector_vae"):
        cmd += ["--nll-samples", str(args.nll_samples)]
    options = shlex.split(args.fairseq_args)  # after the defaults, so that they override them
    finetune = []
    if warm_log is not None:
        # The paper's warm start: the classifier and VAE on the labelled images alone, its last
        # checkpoint kept (a stage interrupted resumes from it), then the whole objective from there.
        warm_dir = save_dir / "warm_start"
        if not training_done(warm_log, args.warm_start_epochs):
            # The warm start's own epochs and learning rate come last: they override --fairseq-args.
            warm_cmd = cmd + options + ["--labelled-only", "--max-epoch", str(args.warm_start_epochs), "--lr",
                                        str(args.warm_start_lr), "--save-dir", str(warm_dir), "--no-epoch-checkpoints"]
            if args.tensorboard:
                warm_cmd += ["--tensorboard-logdir", str(args.out / "tensorboard" / f"{name}.warm")]
            run_logged(warm_cmd, warm_log, env=env, append=resuming(warm_dir))
        finetune = ["--finetune-from-model", str(warm_dir / "checkpoint_last.pt")]
    # Even with --no-save fairseq probes its save dir with a file of a fixed name: one per run,
    # or concurrent runs delete each other's probe.
    keep = ["--no-epoch-checkpoints"] if args.keep_checkpoints else ["--no-save"]
    cmd += ["--max-epoch", str(args.epochs[experiment.split("/")[0]]), *options, *keep, "--save-dir",
            str(save_dir), *finetune]
    if args.tensorboard:
        cmd += ["--tensorboard-logdir", str(args.out / "tensorboard" / name)]
    run_logged(cmd, log, env=env, append=resuming(save_dir))


def resuming(save_dir):
    """Whether fairseq-train will go on from a checkpoint in ``save_dir`` (kept with
    --keep-checkpoints), so that its log is appended to and keeps the epochs before."""
    return (save_dir / "checkpoint_last.pt").is_file()


def mean_spread(values, digits=2):
    """:func:`fairseq_sparse.markdown.mean_spread` of the values that are numbers ("n/a" for none)."""
    return markdown_mean_spread([v for v in values if not math.isnan(v)], digits, missing="n/a")


DATASETS = {"mnist": "MNIST", "digits": "scikit-learn's 8x8 digits"}


def table(experiment, runs, dataset="mnist"):
    """The markdown table of one experiment's runs beside the paper's figures; ``dataset`` (the
    runs' own) and their epochs are said where they are not the paper's setting."""
    metric, higher, _ = EXPERIMENTS[experiment]
    label = {"accuracy": "accuracy (%)", "success": "success (%)", "nll_bits_per_dim": "NLL bits/dim"}[metric]
    header = (["estimator", label] + (["neg. ELBO bits/dim"] if metric == "nll_bits_per_dim" else [])
              + ["decoder calls (training mean)", "decoder calls (last epoch)", "paper (MNIST)", "paper calls"])
    rows = []
    # Bits per dimension: estimators differ by hundredths, so three decimals.
    digits = 3 if metric == "nll_bits_per_dim" else 2
    for estimator in sorted(runs):
        results = runs[estimator]
        row = [estimator, mean_spread([r["test"][metric] for r in results], digits)]
        if metric == "nll_bits_per_dim":
            row.append(mean_spread([r["test"]["neg_elbo_bits_per_dim"] for r in results], digits))
        row.append(mean_spread([statistics.mean(r["train_calls"]) for r in results]))
        row.append(mean_spread([r["train_calls"][-1] for r in results]))
        row.append(str(PAPER.get(experiment, {}).get(estimator, "")))
        row.append(str(PAPER_CALLS.get(experiment, {}).get(estimator, "")))
        rows.append(row)
    lines = [f"### {experiment}" + (" (lower is better)" if not higher else ""), "", markdown_table(header, rows)]
    seeds = {estimator: len(results) for estimator, results in sorted(runs.items())}
    if set(seeds.values()) == {1}:
        lines += ["", "One seed: no spread."]
    elif len(set(seeds.values())) == 1:
        lines += ["", f"Mean ± standard deviation over {next(iter(seeds.values()))} seeds."]
    else:  # runs of a grid collected while some estimators have fewer finished seeds
        lines += ["", "Mean ± standard deviation over the seeds of each estimator: "
                  + ", ".join(f"{estimator} {n}" for estimator, n in seeds.items()) + "."]
    if dataset != "mnist":
        epochs = sorted({len(r["train_calls"]) for results in runs.values() for r in results})
        trained = f", {' to '.join(map(str, epochs[::max(1, len(epochs) - 1)]))} epoch{'s' if epochs != [1] else ''}"
        lines += ["", f"These runs: {DATASETS.get(dataset, dataset)}{trained}. The paper's columns are full MNIST at "
                      "its own training length: a setting these runs do not share, so not a target for them."]
    return "\n".join(lines)


def plot(results, path):
    """Per experiment: decoder calls per training example over the epochs (top) and the
    test metric at each validated epoch (bottom), mean over seeds; returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter

    experiments = list(results)
    colours = {name: plt.get_cmap("tab20")(i) for i, name in enumerate(sorted(ESTIMATORS))}
    width = 4.5 * len(experiments) + 1.5
    fig, axes = plt.subplots(2, len(experiments), figsize=(width, 7.2), squeeze=False)
    lines = {}
    for column, experiment in enumerate(experiments):
        metric = EXPERIMENTS[experiment][0]
        calls_ax, metric_ax = axes[0, column], axes[1, column]
        for estimator, runs in sorted(results[experiment].items()):
            # Solid: exact marginalisation; dotted: Monte Carlo (a fixed number of samples).
            style = "-" if ESTIMATORS[estimator].sparse or estimator == "dense" else ":"
            curves = [r["train_calls"] for r in runs]
            n = min(len(c) for c in curves)
            mean = [statistics.mean(c[i] for c in curves) for i in range(n)]
            (lines[estimator],) = calls_ax.plot(range(1, n + 1), mean, style, marker="o", markersize=3,
                                                color=colours[estimator], label=estimator)
            points = [{int(row["epoch"]): row[metric] for row in r.get("test_curve", [])
                       if "epoch" in row and metric in row} for r in runs]
            shared = sorted(set.intersection(*(set(p) for p in points)))
            if shared:
                metric_ax.plot(shared, [statistics.mean(p[e] for p in points) for e in shared], style, marker="o",
                               markersize=3, color=colours[estimator])
        # A log axis where the calls span decades (dense against sparse); plain numbers on it, and
        # whole epochs on both x axes.
        low, high = calls_ax.dataLim.y0, calls_ax.dataLim.y1
        if low > 0 and high > 10 * low:
            calls_ax.set_yscale("log")
            calls_ax.yaxis.set_major_formatter(ScalarFormatter())
            calls_ax.yaxis.set_minor_formatter(NullFormatter())
        metric_ax.set_xlim(calls_ax.get_xlim())  # the same epochs above and below
        for ax in (calls_ax, metric_ax):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        calls_ax.set_title(experiment)
        calls_ax.set_xlabel("epoch")
        calls_ax.set_ylabel("decoder calls per example (training)")
        metric_ax.set_xlabel("epoch")
        metric_ax.set_ylabel(f"test {metric.replace('_', ' ')}")
    fig.legend([lines[k] for k in sorted(lines)], sorted(lines), fontsize=8, loc="center right")
    fig.tight_layout(rect=(0, 0, 1 - 1.5 / width, 1))
    fig.savefig(path, dpi=130)
    return fig


def run(args):
    """The grid of ``args`` (a :class:`LatentResultsConfig`); says each run as it ends."""
    jobs, said, lock = grid(args), itertools.count(1), threading.Lock()
    print(f"{len(jobs)} runs, {args.jobs} at a time; each run's fairseq-train log is in {args.out / 'logs'}",
          flush=True)

    def one(job):
        start = time.perf_counter()
        result = run_one(args, *job)
        with lock:
            state = "no finished log" if result[3] is None else f"done in {time.perf_counter() - start:.0f} s"
            print(f"[{next(said)}/{len(jobs)}] {job[0]} {job[1]} seed {job[2]}: {state}", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        finished = list(pool.map(one, jobs))
    results = {}
    for experiment, estimator, seed, parsed in finished:
        if parsed is not None:
            results.setdefault(experiment, {}).setdefault(estimator, []).append(parsed)
    if not results:
        raise SystemExit(f"no finished runs in {args.out}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    tables = "\n\n".join(table(experiment, runs, args.dataset) for experiment, runs in results.items())
    (args.out / "tables.md").write_text(tables + "\n", encoding="utf-8")
    print(tables)
    plot(results, args.out / "decoder_calls.png")
    print(f"\nplot of decoder calls and the test metric over training: {args.out / 'decoder_calls.png'}")
