"""The sentence-VAE grid of Prokhorov et al. (2021, Sec. 6): objectives x settings x seeds
through fairseq-train, the average Hoyer over training and, with ``--analyse``, the
frozen-encoder classifier on the test split (``scripts/sentence_vae_stability.py`` is its
command line).

Runs:
- HSVAE over (alpha, beta) of its Beta prior (``--hsvae-settings``), with the KL weights
  (psi, lambda) of ``--hsvae-weights``: the authors' 0.01, 0.01 (VictorProkhorov/HSVAE),
  without which the posterior collapses;
- MAT-VAE over (psi, lambda) (``--mat-vae-settings``);
- baselines (``--baselines``): ``elbo``, ``elbo_l1``, ``elbo_l2`` with their KL weight psi
  and, for the penalties, the penalty's weight (``elbo_l1,0.01,0.1``).
Every run has the authors' optimiser unless told otherwise: Adam, ``--lr`` 8e-4,
``--batch-size`` 256; and, as in their code, no dropout unless ``--dropout`` or ``--word-dropout``
(every run's).

The paper's claim: HSVAE's sparsity follows (alpha, beta) and is steady across
seeds; MAT-VAE's is erratic across settings.  Writes ``DIR/stability.png`` (validation
average Hoyer per epoch, mean and range over seeds, one panel per objective),
``DIR/stability.json`` and a table of the last epoch (reconstruction and KL in nats
per sentence, average Hoyer; with ``--analyse``, the objective's KL terms on test,
the test accuracy of a classifier on the frozen encoder's K = 5 samples
(``fairseq-sparse-sentence-vae-analysis``), the same classifier's on the posterior means,
the majority class's, the length probe's R^2, the active units and, for HSVAE, the bits
of its spike pattern the sentence decides against the pattern's entropy).  A run keeps its
last checkpoint, so an interrupted grid resumes each run where it stopped (its log
is appended to), and a grid rerun with more ``--epochs`` trains its runs on; runs and
analyses already finished are collected, not rerun.  Each analysis is written to
``DIR/analysis/RUN/epochN/`` for the epoch N its checkpoint had reached, so the analysis
of a shorter run is kept when the grid trains it on.
"""

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..checkpoint_migrations import RENAMED_CRITERIA
from ..configs import check
from ..experiments import FAIRSEQ_TRAIN, PLUGIN_DIR, epoch_metrics, job_env, training_done
from ..markdown import mean_spread, table as markdown_table

# objective -> (its knob's name, the fairseq-train option given its value) for each value of a setting
KNOBS = {"hsvae": (("alpha", "--prior-alpha"), ("beta", "--prior-beta")),
         "mat_vae": (("psi", "--kl-weight"), ("lambda", "--mmd-weight")),
         "elbo": (("psi", "--kl-weight"),),
         "elbo_l1": (("psi", "--kl-weight"), ("penalty", "--regularization-weight")),
         "elbo_l2": (("psi", "--kl-weight"), ("penalty", "--regularization-weight"))}


def settings(text):
    """An argparse type: "10,1 1,1" -> ((10.0, 1.0), (1.0, 1.0))."""
    try:
        return tuple(tuple(float(v) for v in pair.split(",")) for pair in text.split())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: settings are space-separated pairs like '10,1 1,1'") from None


def pair(text):
    """An argparse type: "0.01,0.01" -> (0.01, 0.01)."""
    values = settings(text)
    if len(values) != 1 or len(values[0]) != 2:
        raise argparse.ArgumentTypeError(f"{text!r}: one pair like '0.01,0.01'")
    return values[0]


def _probability_interval(value, high_included):
    """The interval ``value`` must lie in, where it lies outside it (None where it is inside)."""
    inside = value is not None and (0 <= value <= 1 if high_included else 0 <= value < 1)
    return None if inside else ("[0, 1]" if high_included else "[0, 1)")


def probability(high_included):
    """An argparse type: a float in [0, 1) or, with ``high_included``, in [0, 1]."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = None
        interval = _probability_interval(value, high_included)
        if interval is not None:
            raise argparse.ArgumentTypeError(f"{text!r}: a probability in {interval}")
        return value
    parse.__name__ = "probability"
    return parse


def baselines(text):
    """An argparse type: "elbo,1 elbo_l1,0.01,0.1" -> (("elbo", (1.0,)), ("elbo_l1", (0.01, 0.1)))."""
    runs = []
    for item in text.split():
        objective, *values = item.split(",")
        if objective in RENAMED_CRITERIA:
            raise argparse.ArgumentTypeError(f"{item!r}: {objective} is now {RENAMED_CRITERIA[objective]}")
        if objective not in ("elbo", "elbo_l1", "elbo_l2") or not 1 <= len(values) <= len(KNOBS[objective]):
            raise argparse.ArgumentTypeError(
                f"{item!r}: a baseline is elbo,PSI or elbo_l1,PSI[,PENALTY] or elbo_l2,PSI[,PENALTY]")
        try:
            runs.append((objective, tuple(float(v) for v in values)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: PSI and PENALTY are numbers") from None
    return tuple(runs)


@dataclass(frozen=True)
class StabilityConfig:
    """The grid's options (``scripts/sentence_vae_stability.py`` builds its parser from them)."""

    data: Path = field(metadata={"help": "sentence_vae DATA_DIR (train/valid/test.txt or binarized)",
                                 "positional": True})
    out: Path = field(metadata={"help": "directory for the runs, tables and plots", "required": True})
    seeds: int = field(default=3, metadata={"help": "runs per setting: N seeds, from --first-seed on", "least": 1})
    first_seed: int = field(default=1, metadata={
        "help": "the first of the --seeds seeds, to add seeds to a grid run before", "least": 0})
    epochs: int = field(default=10, metadata={"help": "training epochs per run", "least": 1})
    hsvae_settings: tuple = field(default=settings("10,1 5,5 1,10"), metadata={
        "help": "HSVAE (alpha, beta) pairs; '' for none", "type": settings, "shown": "'10,1 5,5 1,10'"})
    hsvae_weights: tuple = field(default=(0.01, 0.01), metadata={
        "help": "HSVAE's KL weights psi,lambda", "type": pair, "shown": "the authors' 0.01,0.01"})
    hsvae_options: str = field(default="", metadata={
        "help": "more fairseq-train options for the HSVAE runs, e.g. --hsvae-options='--spike-std 0.05 "
                "--hard-slab' (the authors' sampler)"})
    mat_vae_settings: tuple = field(default=settings("1,1 1,10 0.1,10"), metadata={
        "help": "MAT-VAE (psi, lambda) pairs; '' for none", "type": settings, "shown": "'1,1 1,10 0.1,10'"})
    baselines: tuple = field(default=(), metadata={
        "help": "e.g. 'elbo,0.01 elbo,1 elbo_l1,0.01 elbo_l2,0.01'", "type": baselines, "shown": "none"})
    latent_dim: int = field(default=32, metadata={"help": "latent code dimensions", "least": 1})
    embed_dim: int = field(default=256, metadata={"help": "word embedding width", "least": 1})
    hidden_dim: int = field(default=512, metadata={"help": "GRU encoder and decoder width", "least": 1})
    dropout: float = field(default=0.0, metadata={
        "help": "dropout on the word embeddings and decoder states of every run, against overfitting a small "
                "training set; the authors' code has none", "type": probability(high_included=False)})
    word_dropout: float = field(default=0.0, metadata={
        "help": "every run's decoder reads each input word as <unk> with this probability in training (Bowman et "
                "al. 2016), so that it leans on the code; the authors' code has none",
        "type": probability(high_included=True)})
    lr: float = field(default=8e-4, metadata={"help": "Adam's learning rate"})
    batch_size: int = field(default=256, metadata={"help": "sentences per update", "least": 1})
    analyse: bool = field(default=False, metadata={
        "help": "also classify the test split from each run's frozen encoder (fairseq-sparse-sentence-vae-analysis)"})
    jobs: int = field(default=1, metadata={
        "help": "runs at the same time, each on its share of the cores unless OMP_NUM_THREADS is set", "least": 1})
    gpu: bool = field(default=False, metadata={
        "help": "train on the (first) CUDA GPU, --jobs runs sharing it; the analysis stays on the CPU (default: "
                "train on the CPU)"})

    def __post_init__(self):
        check(self)
        for name, high_included in (("dropout", False), ("word_dropout", True)):
            interval = _probability_interval(getattr(self, name), high_included)
            if interval is not None:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}: a probability in {interval}")
        if not (self.hsvae_settings or self.mat_vae_settings or self.baselines):
            raise ValueError("nothing to run: give HSVAE or MAT-VAE settings or baselines")

    @property
    def cpu(self):
        return not self.gpu


def knob_names(objective):
    """"(alpha, beta)", "(psi,)": how the table and plot name a setting's values."""
    return str(tuple(name for name, _ in KNOBS[objective])).replace("'", "")


def run_name(objective, setting, seed):
    return f"{objective}/{'_'.join(f'{v:g}' for v in setting)}_seed{seed}"


def train_command(args, objective, setting, seed, save_dir):
    cmd = [*FAIRSEQ_TRAIN, str(args.data), "--user-dir",
           str(PLUGIN_DIR), "--task", "sentence_vae", "--arch", "sentence_vae", "--criterion", objective]
    for (_, option), value in zip(KNOBS[objective], setting):
        cmd += [option, str(value)]
    if objective == "hsvae":
        cmd += ["--kl-weight", str(args.hsvae_weights[0]), "--gamma-kl-weight", str(args.hsvae_weights[1]),
                *shlex.split(args.hsvae_options)]
    return cmd + [
        "--latent-dim", str(args.latent_dim), "--embed-dim", str(args.embed_dim), "--hidden-dim",
        str(args.hidden_dim), "--dropout", str(args.dropout), "--word-dropout", str(args.word_dropout),
        "--optimizer", "adam", "--lr", str(args.lr), "--batch-size", str(args.batch_size),
        "--max-epoch", str(args.epochs), "--seed", str(seed), "--num-workers", "0", "--no-epoch-checkpoints",
        "--log-format", "simple", "--log-interval", "1000", *(["--cpu"] if args.cpu else []),
        "--save-dir", str(save_dir)]


def run_one(args, objective, setting, seed):
    name = run_name(objective, setting, seed)
    log = args.out / "logs" / f"{name}.log"
    save_dir = args.out / "checkpoints" / name
    env = job_env(args.jobs)
    if not training_done(log, args.epochs):
        log.parent.mkdir(parents=True, exist_ok=True)
        # Appended: a resumed run (fairseq reads checkpoint_last.pt in its save dir) keeps the
        # epochs logged before the interruption.
        with open(log, "a", encoding="utf-8") as out:
            proc = subprocess.run(train_command(args, objective, setting, seed, save_dir), stdout=out,
                                  stderr=subprocess.STDOUT, text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{name} failed; log in {log}:\n{log.read_text(encoding='utf-8')[-2000:]}")
    valid = epoch_metrics(log.read_text(encoding="utf-8")).get("valid", [])  # a repeated epoch once
    analysis = None
    if args.analyse:
        # One directory per epoch the checkpoint had reached: a run trained on later is analysed
        # again into its own, and the shorter run's analysis stays where it was, not overwritten.
        result = args.out / "analysis" / name / f"epoch{int(valid[-1]['epoch'])}" / "analysis.json"
        if not result.is_file():
            cmd = [sys.executable, "-m", "fairseq_sparse.sentence_vae.analysis",
                   str(save_dir / "checkpoint_last.pt"), str(args.data), "--out", str(result.parent),
                   "--baseline-epochs", "0", "--seed", str(seed)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                raise SystemExit(f"analysis of {name} failed:\n{proc.stderr[-2000:]}")
        analysis = json.loads(result.read_text(encoding="utf-8"))
    return objective, setting, seed, valid, analysis


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (objective, by_setting) in zip(axes[0], results.items()):
        for setting, runs in by_setting.items():
            curves = [[epoch["average_hoyer"] for epoch in run["valid"]] for run in runs]
            n = min(len(c) for c in curves)
            mean = [statistics.mean(c[i] for c in curves) for i in range(n)]
            low = [min(c[i] for c in curves) for i in range(n)]
            high = [max(c[i] for c in curves) for i in range(n)]
            (line,) = ax.plot(range(1, n + 1), mean, marker="o", markersize=3,
                              label=f"{knob_names(objective)} = {setting}")
            ax.fill_between(range(1, n + 1), low, high, color=line.get_color(), alpha=0.2)
        ax.set_title(f"{objective}: average Hoyer, mean and range over seeds", fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylabel("average Hoyer (validation)")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def spike_bits(runs):
    """"information / entropy" of HSVAE's spike pattern, means over seeds; "-" for the
    objectives without one (and analyses written before it)."""
    patterns = [run["analysis"]["spike_pattern"] for run in runs if "spike_pattern" in run["analysis"]]
    if not patterns:
        return "-"
    return (f"{statistics.mean(p['information_bits'] for p in patterns):.2f} / "
            f"{statistics.mean(p['entropy_bits'] for p in patterns):.2f}")


def table(results, analysed):
    header = ["objective", "setting", "seeds", "reconstruction", "KL", "average Hoyer"]
    if analysed:
        header += ["KL terms (test)", "frozen-encoder accuracy (test)", "the same on posterior means",
                   "the two on valid (to choose on)",
                   "majority class", "length probe R^2 (means)", "active units",
                   "spike pattern: bits the sentence decides / entropy"]
    rows = []
    for objective, by_setting in results.items():
        for setting, runs in by_setting.items():
            last = [run["valid"][-1] for run in runs]
            row = [objective, f"{knob_names(objective)} = {setting}", str(len(runs)),
                   mean_spread([e["reconstruction"] for e in last], 2), mean_spread([e["kl"] for e in last], 2),
                   mean_spread([e["average_hoyer"] for e in last], 3)]
            if analysed:
                terms = runs[0]["analysis"].get("test_kl", {})
                row += [", ".join(f"{name} {statistics.mean(run['analysis']['test_kl'][name] for run in runs):.2f}"
                                  for name in terms) or "-",
                        mean_spread([run["analysis"]["frozen_encoder_accuracy"] for run in runs], 2),
                        # Analyses written before the column existed lack it.
                        mean_spread([run["analysis"]["frozen_encoder_accuracy_means"] for run in runs
                                     if "frozen_encoder_accuracy_means" in run["analysis"]], 2),
                        " / ".join(mean_spread([run["analysis"][key] for run in runs
                                                if run["analysis"].get(key) is not None], 2)
                                   for key in ("frozen_encoder_accuracy_valid", "frozen_encoder_accuracy_means_valid")),
                        f"{runs[0]['analysis']['majority_class_accuracy']:.2f}",
                        mean_spread([run["analysis"]["length_probe_r2_means"] for run in runs
                                     if "length_probe_r2_means" in run["analysis"]], 3),
                        mean_spread([run["analysis"]["active_units"] for run in runs
                                     if "active_units" in run["analysis"]], 1),
                        spike_bits(runs)]
            rows.append(row)
    return markdown_table(header, rows)


def run(args):
    """The grid of ``args`` (a :class:`StabilityConfig`)."""
    grid = [(objective, setting, seed)
            for objective, setting in ([("hsvae", s) for s in args.hsvae_settings]
                                       + [("mat_vae", s) for s in args.mat_vae_settings] + list(args.baselines))
            for seed in range(args.first_seed, args.first_seed + args.seeds)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = list(pool.map(lambda job: run_one(args, *job), grid))
    results = {}
    for objective, setting, seed, valid, analysis in done:
        if not valid:
            raise SystemExit(f"{run_name(objective, setting, seed)}: no validation in its log")
        results.setdefault(objective, {}).setdefault(setting, []).append(
            {"seed": seed, "valid": valid, "analysis": analysis})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "stability.json").write_text(json.dumps(
        {o: {",".join(f"{v:g}" for v in s): runs for s, runs in by.items()} for o, by in results.items()}, indent=1),
        encoding="utf-8")
    plot(results, args.out / "stability.png")
    text = table(results, args.analyse)
    (args.out / "table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    print(f"\nplot: {args.out / 'stability.png'}")
