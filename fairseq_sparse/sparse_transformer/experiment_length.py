"""The length-extrapolation study: decoder-only models (``entmax_transformer_lm``) trained on
the synthetic tasks of ``length_extrapolation`` at prompt lengths 16 to 32 (the paper's 32 to
64 halved, for a study two CPU cores train) and scored by greedy exact match at 1x to 16x
the longest, one model per task, attention variant, position option and seed (Vasylenko,
Pitorro, Martins & Treviso, "Long-Context Generalization with Sparse Attention", ICLR 2026,
whose Table 1 this measures against).

Variants (:data:`VARIANTS`): softmax; scalable softmax (softmax with the ``log`` length
scale); 1.5-entmax; alpha-entmax with a learnable alpha per head; ASEntmax (1.5-entmax with
the adaptive length scale) and the adaptive scale with learnable alphas, each with the
scale's near-identity start (``adaptive``) or ASEntmax's own (``adaptive_paper``).

Each run trains with ``fairseq-train`` (resumed from its last checkpoint when the study is
run again), keeps the checkpoint of lowest loss on ``valid`` (at 1.5x: the only length the
choice reads), then scores every split and measures its attention as the length grows.  A
finished run's result goes into ``RESULTS/results.json`` at once, so that an interrupted
study (or one continued in another checkout holding that file) redoes nothing finished;
``RESULTS/results.md``, ``RESULTS/exact_match.png`` and ``RESULTS/attention.png`` are written
from it after every run.
"""

import dataclasses
import json
import math
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..configs import check, parse
from ..experiments import FAIRSEQ_TRAIN, PLUGIN_DIR, job_env
from ..markdown import mean_spread

# name: (attention normaliser, length scale, as the table calls it)
VARIANTS = {
    "softmax": ("softmax", "none", "softmax"),
    "scalable_softmax": ("softmax", "log", "scalable softmax"),
    "entmax15": ("entmax15", "none", "1.5-entmax"),
    "alpha_entmax": ("alpha_entmax", "none", "alpha-entmax"),
    "asentmax": ("entmax15", "adaptive", "ASEntmax (1.5), identity start"),
    "alpha_asentmax": ("alpha_entmax", "adaptive", "ASEntmax, learned alpha, identity start"),
    "asentmax_paper": ("entmax15", "adaptive_paper", "ASEntmax (1.5), paper's start"),
    "alpha_asentmax_paper": ("alpha_entmax", "adaptive_paper", "ASEntmax, learned alpha, paper's start"),
}
# The variants a study runs unless told: the adaptive scale with the start that lets it depend
# on n from the first update (docs/results/sparse_transformer.md#length-extrapolation-cpu).
DEFAULT_VARIANTS = ("softmax", "scalable_softmax", "entmax15", "alpha_entmax", "asentmax_paper",
                    "alpha_asentmax_paper")
POSITION_CHOICES = ("nape", "none", "alibi", "rope")

# Vasylenko et al. (ICLR 2026), Table 1, exact match (%) as quoted by the issue this study
# answers: {task: {variant: {factor: value}}}.
PAPER = {
    "reverse": {"softmax": {2: 0.0, 4: 0.0}, "entmax15": {2: 93.5, 4: 28.5}, "asentmax_paper": {2: 99.8, 4: 96.4}},
    "sort": {"softmax": {2: 0.0}, "entmax15": {2: 99.3}, "asentmax_paper": {2: 100.0}},
    "associative_recall": {"softmax": {256: 80.2}, "asentmax_paper": {256: 99.0}},
}


@dataclass(frozen=True)
class LengthStudyConfig:
    """The study's options (``scripts/length_study.py`` builds its parser from them)."""

    out: Path = field(default=Path("outputs/length_study"), metadata={
        "help": "checkpoints and training logs, one directory per run"})
    results: Path = field(default=Path("docs/results/length_study"), metadata={
        "help": "results.json (every finished run, read back to skip them), results.md, exact_match.png and "
                "attention.png"})
    tasks: tuple[str, ...] = field(default=("copy", "flip_flop", "sort"), metadata={
        "help": "synthetic tasks", "choices": ("copy", "reverse", "sort", "associative_recall", "flip_flop")})
    variants: tuple[str, ...] = field(default=DEFAULT_VARIANTS, metadata={
        "help": "attention variants", "choices": tuple(VARIANTS)})
    positions: tuple[str, ...] = field(default=("nape",), metadata={
        "help": "position options (entmax_transformer_lm's --positions)", "choices": POSITION_CHOICES})
    seeds: tuple[int, ...] = field(default=(1, 2, 3), metadata={"help": "model seeds (fairseq's --seed)"})
    layers: int = field(default=2, metadata={"help": "decoder layers", "least": 1})
    embed_dim: int = field(default=64, metadata={"help": "model width; feed-forward 4x", "least": 1})
    heads: int = field(default=4, metadata={"help": "attention heads", "least": 2})
    updates: int = field(default=6000, metadata={"help": "training updates per run", "least": 1})
    lr: float = field(default=2e-3, metadata={"help": "Adam's peak learning rate (inverse square root schedule)"})
    warmup: int = field(default=200, metadata={"help": "warm-up updates", "least": 0})
    batch_size: int = field(default=32, metadata={"help": "examples a batch", "least": 1})
    alpha_init: float = field(default=1.5, metadata={
        "help": "the learnable alphas' start (1.5: where the fixed variants sit)"})
    alpha_lr_scale: float = field(default=10.0, metadata={
        "help": "the alphas' learning rate as a multiple of the model's (--alpha-lr-scale)"})
    min_length: int = field(default=16, metadata={"help": "shortest training prompt", "least": 1})
    max_length: int = field(default=32, metadata={"help": "longest training prompt (the paper's: 64)", "least": 1})
    test_factors: str = field(default="1,2,4,8,16", metadata={"help": "test lengths as multiples of --max-length"})
    test_examples: int = field(default=300, metadata={
        "help": "examples of each test split (the task's default is 1,000; at 16x one takes a 2,049-token pass)",
        "least": 1})
    valid_examples: int = field(default=200, metadata={"help": "examples of valid (1.5x)", "least": 1})
    stats_examples: int = field(default=8, metadata={
        "help": "examples of each split whose attention is measured (entropy, keys kept)", "least": 1})
    validate_every: int = field(default=500, metadata={
        "help": "updates between validations and checkpoints (a resumed run loses at most these)", "least": 1})
    jobs: int = field(default=2, metadata={"help": "runs at the same time, a CPU thread each", "least": 1})
    device: str = field(default="cpu", metadata={"help": "train and score on CPU or CUDA", "choices": ("cpu", "cuda")})
    only_report: bool = field(default=False, metadata={"help": "write results.md and the figure from results.json"})

    def __post_init__(self):
        check(self)
        if self.min_length > self.max_length:
            raise ValueError(f"--min-length {self.min_length} above --max-length {self.max_length}")
        if self.embed_dim % self.heads or (self.embed_dim // self.heads) % 2:
            raise ValueError(f"--embed-dim {self.embed_dim}: an even width per head of the {self.heads} heads")

    def model(self):
        """What every run shares and a results file must agree with."""
        skip = {"out", "results", "tasks", "variants", "positions", "seeds", "jobs", "device", "only_report",
                "stats_examples"}
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()
                if k not in skip}


@dataclass(frozen=True)
class Run:
    task: str
    variant: str
    positions: str
    seed: int

    @property
    def key(self):
        return f"{self.task}/{self.positions}/{self.variant}/seed{self.seed}"


def runs(config):
    """Every run, seed by seed: each task and variant gets its first seed before any gets a second."""
    return [Run(t, v, p, s) for s in config.seeds for t in config.tasks for p in config.positions
            for v in config.variants]


def task_arguments(config, task):
    return ["--task", "length_extrapolation", "--synthetic-task", task, "--min-length", config.min_length,
            "--max-length", config.max_length, "--valid-examples", config.valid_examples, "--test-examples",
            config.test_examples, "--test-factors", config.test_factors]


def train_command(config, run, save):
    normalizer, length_scale, _ = VARIANTS[run.variant]
    return [*FAIRSEQ_TRAIN, "--user-dir", PLUGIN_DIR, *task_arguments(config, run.task),
            "--arch", "entmax_transformer_lm_tiny", "--decoder-layers", config.layers,
            "--decoder-embed-dim", config.embed_dim, "--decoder-ffn-embed-dim", 4 * config.embed_dim,
            "--decoder-attention-heads", config.heads, "--attention-normalizer", normalizer,
            "--alpha-init", config.alpha_init, "--alpha-lr-scale", config.alpha_lr_scale,
            "--positions", run.positions, "--length-scale", length_scale, "--dropout", 0,
            "--criterion", "cross_entropy", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", config.lr,
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", config.warmup, "--batch-size", config.batch_size,
            "--max-update", config.updates, "--seed", run.seed, "--save-dir", save, "--num-workers", 0,
            "--validate-interval-updates", config.validate_every, "--save-interval-updates", config.validate_every,
            "--keep-interval-updates", 1, "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", 100,
            "--log-file", save / "train.log", *(["--cpu"] if config.device == "cpu" else [])]


def load(path):
    from fairseq import checkpoint_utils

    (model,), _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    return model.eval(), task


@torch.no_grad()
def attention_by_length(model, task, splits, examples):
    """{split: {"entropy": mean entropy (nats), "kept": mean keys with nonzero weight, "seen": mean keys a
    query may see, and with a length scale "factor": its mean query factor on the scaled heads}} over the
    answer's queries of ``examples`` examples, every head and layer."""
    from .length_task import SyntheticDataset

    modules = [m for _, _, m in model.attention_modules()]
    scales = [m.length_scale for m in modules if m.length_scale is not None]
    factors = []
    hooks = [s.register_forward_hook(lambda s, _, out: factors.append(out[:, list(s.scaled_heads)])) for s in scales]
    device = next(model.parameters()).device
    found = {}
    for split in splits:
        data = SyntheticDataset(task.examples(split)[:examples], task.dictionary, shuffle=False)
        entropy = kept = seen = count = factor = 0.0
        for i in range(len(data)):
            prompt_length = len(data.examples[i][0])
            for m in modules:
                m.record_attention = True
            factors.clear()
            model(data[i]["source"][None].to(device))
            factor += sum(float(f[0, :, prompt_length + 1:].mean()) for f in factors) / max(len(factors), 1)
            for m in modules:
                probs = m.last_attention[0, :, prompt_length + 1:].double()  # (H, answer queries, keys)
                entropy += float(-(probs * torch.log(probs.clamp(min=1e-30))).sum(-1).sum())
                kept += float((probs > 0).sum())
                rows = torch.arange(prompt_length + 1, probs.shape[1] + prompt_length + 1)
                seen += float((rows + 1).sum()) * probs.shape[0]
                count += probs.shape[0] * probs.shape[1]
                m.record_attention, m.last_attention = False, None
        found[split] = {"entropy": entropy / count, "kept": kept / count, "seen": seen / count}
        if scales:
            found[split]["factor"] = factor / len(data)
    for hook in hooks:
        hook.remove()
    return found


def learned_parameters(model):
    """The learned alphas (per layer, per head) and the ``log`` length scale's weights, for the
    report (the adaptive forms' factors depend on the token: :func:`attention_by_length` reports
    their mean by length)."""
    found = {"alpha": [], "scale": []}
    for _, _, module in model.attention_modules():
        if module.head_alpha is not None:
            found["alpha"].append([round(float(a), 4) for a in module.alpha()])
        scale = module.length_scale
        if scale is not None and scale.form == "log":
            found["scale"].append([round(float(w), 4) for w in scale.weight])
    return found


def score(checkpoint, stats_examples, device="cpu"):
    """What one trained run measures: exact match on every split, attention by length, learned
    parameters, the update its checkpoint was saved at."""
    from .length_task import exact_match

    model, task = load(checkpoint)
    model.to(device)
    splits = list(task.splits())[1:]  # valid and the test lengths
    started = time.time()
    matches = {split: exact_match(model, task, split) for split in splits}
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    return {"exact_match": matches, "attention": attention_by_length(model, task, splits, stats_examples),
            "learned": learned_parameters(model), "best_update": int(state["optimizer_history"][-1]["num_updates"]),
            "score_seconds": round(time.time() - started, 1)}


def train_seconds(log):
    """Training wall time from fairseq's JSON log (the largest ``wall`` it records)."""
    wall = 0.0
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            if '"wall"' in line and "{" in line:
                try:
                    wall = max(wall, float(json.loads(line[line.index("{"):])["wall"]))
                except (ValueError, KeyError):
                    pass
    return wall


def run_one(config, run):
    """Train ``run`` (resuming its last checkpoint), then score it in a process of its own (the
    cores shared out among the jobs, as the training's), and return its result."""
    save = config.out / run.key
    save.mkdir(parents=True, exist_ok=True)
    env = job_env(config.jobs)
    with open(save / "stdout.log", "a", encoding="utf-8") as out:
        subprocess.run([str(c) for c in train_command(config, run, save)], check=True, stdout=out,
                       stderr=subprocess.STDOUT, env=env)
        subprocess.run([sys.executable, "-m", __name__, "score", str(save / "checkpoint_best.pt"),
                        str(save / "score.json"), str(config.stats_examples), config.device], check=True,
                       stdout=out, stderr=subprocess.STDOUT, env=env)
    scored = json.loads((save / "score.json").read_text(encoding="utf-8"))
    return {"task": run.task, "variant": run.variant, "positions": run.positions, "seed": run.seed, **scored,
            "updates": config.updates, "train_seconds": round(train_seconds(save / "train.log"), 1),
            "device": config.device}


def read_results(config):
    """The finished runs of ``RESULTS/results.json``, refusing one made with another model or schedule."""
    path = config.results / "results.json"
    if not path.exists():
        return {"config": config.model(), "runs": {}}
    found = json.loads(path.read_text(encoding="utf-8"))
    differ = {k: (v, config.model().get(k)) for k, v in found["config"].items() if config.model().get(k) != v}
    if differ:
        raise ValueError(f"{path} holds runs made with other options: " + ", ".join(
            f"--{k.replace('_', '-')} {old} there, {new} here" for k, (old, new) in differ.items()))
    return found


def write_results(config, found):
    config.results.mkdir(parents=True, exist_ok=True)
    path = config.results / "results.json"
    path.with_suffix(".tmp").write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    path.with_suffix(".tmp").replace(path)  # whole or not at all
    (config.results / "results.md").write_text(table(config, found), encoding="utf-8")
    plot(found, config.results / "exact_match.png")
    plot_attention(found, config.results / "attention.png")


def factors_of(found):
    splits = sorted({s for r in found["runs"].values() for s in r["exact_match"] if s.startswith("test")},
                    key=lambda s: float(s[4:-1]))
    return splits


def table(config, found):
    """results.md: exact match (mean ± sd over seeds) per task, positions and variant at valid and
    every test length, the attention's entropy and keys kept as the length grows, the learned
    parameters, and the paper's numbers beside ours."""
    done = found["runs"]
    splits = factors_of(found)
    lines = ["# Length extrapolation: exact match (%) by test length", "",
             "Written by `scripts/length_study.py` from `results.json`; mean ± sd over seeds (n = runs).", "",
             "Options: " + ", ".join(f"{k} {v}" for k, v in found["config"].items()), "",
             "![exact match against test length](exact_match.png)", "",
             "![attention entropy and keys kept against test length](attention.png)", ""]
    groups = sorted({(r["task"], r["positions"]) for r in done.values()})
    for task, positions in groups:
        lines += [f"## {task}, positions {positions}", "",
                  "| variant | n | valid 1.5x | " + " | ".join(s[4:] for s in splits) + " | paper |",
                  "| --- | --- | --- | " + " | ".join("---" for _ in splits) + " | --- |"]
        for variant in VARIANTS:
            rs = [r for r in done.values() if (r["task"], r["positions"], r["variant"]) == (task, positions, variant)]
            if not rs:
                continue
            paper = PAPER.get(task, {}).get(variant, {})
            cells = [mean_spread([r["exact_match"][s] for r in rs if s in r["exact_match"]], 1) for s in splits]
            lines.append(f"| {VARIANTS[variant][2]} | {len(rs)} | {mean_spread([r['exact_match']['valid'] for r in rs], 1)}"
                         f" | " + " | ".join(cells) + " | " +
                         (", ".join(f"{f}x {v:g}" for f, v in paper.items()) or "-") + " |")
        lines += ["", "Attention on the answer's queries (every head and layer): entropy in nats / keys kept "
                  "(keys a query may see); with a length scale, its mean query factor on the scaled heads.", "",
                  "| variant | " + " | ".join(s[4:] for s in splits) + " |", "| --- | " +
                  " | ".join("---" for _ in splits) + " |"]
        for variant in VARIANTS:
            rs = [r for r in done.values() if (r["task"], r["positions"], r["variant"]) == (task, positions, variant)]
            if not rs:
                continue
            cells = []
            for s in splits:
                a = [r["attention"][s] for r in rs if s in r["attention"]]
                cells.append("-" if not a else f"{statistics.mean(x['entropy'] for x in a):.2f} / "
                             f"{statistics.mean(x['kept'] for x in a):.1f} ({statistics.mean(x['seen'] for x in a):.0f})"
                             + (f"; x{statistics.mean(x['factor'] for x in a):.2f}" if all('factor' in x for x in a) else ""))
            lines.append(f"| {VARIANTS[variant][2]} | " + " | ".join(cells) + " |")
        learned = [(r["variant"], r["seed"], r["learned"]) for r in done.values()
                   if (r["task"], r["positions"]) == (task, positions) and (r["learned"]["alpha"] or r["learned"]["scale"])]
        if learned:
            lines += ["", "Learned alphas (per layer, per head) and length scales:", ""]
            for variant, seed, got in sorted(learned, key=lambda x: (list(VARIANTS).index(x[0]), x[1])):
                lines.append(f"- {VARIANTS[variant][2]}, seed {seed}: alphas {got['alpha'] or '-'}; scale "
                             f"{json.dumps(got['scale']) if got['scale'] else '-'}")
        seconds = [r["train_seconds"] for r in done.values() if (r["task"], r["positions"]) == (task, positions)]
        lines += ["", f"Training wall time per run: {statistics.mean(seconds) / 60:.1f} min on average "
                      f"({found['config']['updates']} updates of {found['config']['batch_size']} examples).", ""]
    return "\n".join(lines) + "\n"


def _figure(found, rows, height):
    """(pyplot, figure, axes, [(task, positions, {variant: its runs})], test splits): a column per
    task and positions, ``rows`` rows; None when no run is done."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = found["runs"]
    groups = sorted({(r["task"], r["positions"]) for r in done.values()})
    if not groups:
        return None
    columns = []
    for task, positions in groups:
        by_variant = {v: [r for r in done.values() if (r["task"], r["positions"], r["variant"]) == (task, positions, v)]
                      for v in VARIANTS}
        columns.append((task, positions, {v: rs for v, rs in by_variant.items() if rs}))
    fig, axes = plt.subplots(rows, len(groups), figsize=(4.5 * len(groups), height), squeeze=False, sharex=True)
    for column, (task, positions, _) in enumerate(columns):
        axes[0][column].set_title(f"{task}, positions {positions}")
        axes[-1][column].set_xscale("log", base=2)
        axes[-1][column].set_xlabel("test length / longest training length")
    return plt, fig, axes, columns, factors_of(found)


def _finish(plt, fig, axes, path):
    """One legend for every panel, below them (each variant that any panel draws, once); saved."""
    handles = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.tight_layout()
    fig.legend(handles.values(), handles.keys(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(len(handles), 4), fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _color(variant):
    return f"C{list(VARIANTS).index(variant)}"  # one colour a variant in every panel


def plot(found, path):
    """exact_match.png: exact match against test length, a panel per task and positions, a line per
    variant (mean over seeds, the band their range; the seeds are counted in results.md)."""
    made = _figure(found, 1, 3.6)
    if made is None:
        return
    plt, fig, axes, columns, splits = made
    xs = [float(s[4:-1]) for s in splits]
    for ax, (_, _, by_variant) in zip(axes[0], columns):
        for variant, rs in by_variant.items():
            values = [[r["exact_match"].get(s, math.nan) for r in rs] for s in splits]
            ax.plot(xs, [statistics.mean(v) for v in values], marker="o", color=_color(variant),
                    label=VARIANTS[variant][2])
            if len(rs) > 1:
                ax.fill_between(xs, [min(v) for v in values], [max(v) for v in values], color=_color(variant),
                                alpha=0.15)
        ax.set_ylim(-2, 102)
    axes[0][0].set_ylabel("exact match (%)")
    _finish(plt, fig, axes, path)


def plot_attention(found, path):
    """attention.png: the attention on the answer's queries against test length, a column per
    task and positions, a line per variant (mean over seeds): its entropy (nats) above, the share
    of the keys a query may see that keep a nonzero weight below (softmax's drop only where a
    weight underflows float32)."""
    made = _figure(found, 2, 6.4)
    if made is None:
        return
    plt, fig, axes, columns, splits = made
    xs = [float(s[4:-1]) for s in splits]
    for column, (_, _, by_variant) in enumerate(columns):
        for variant, rs in by_variant.items():
            at = [[r["attention"][s] for r in rs if s in r["attention"]] for s in splits]
            entropy = [statistics.mean(a["entropy"] for a in runs) if runs else math.nan for runs in at]
            kept = [statistics.mean(a["kept"] / a["seen"] for a in runs) if runs else math.nan for runs in at]
            for row, values in enumerate((entropy, kept)):
                axes[row][column].plot(xs, values, marker="o", color=_color(variant), label=VARIANTS[variant][2])
        axes[1][column].set_ylim(0, 1.05)
    axes[0][0].set_ylabel("entropy (nats)")
    axes[1][0].set_ylabel("keys kept / keys seen")
    _finish(plt, fig, axes, path)


def run(config):
    """Train and score every run of ``config`` not yet in results.json, ``config.jobs`` at a time."""
    found = read_results(config)
    if config.only_report:
        write_results(config, found)
        return found
    todo = [r for r in runs(config) if r.key not in found["runs"]]
    print(f"length study: {len(todo)} runs to do, {len(found['runs'])} done", flush=True)

    lock = threading.Lock()

    def one(r):
        started = time.time()
        print(f"[start] {r.key}", flush=True)
        result = run_one(config, r)
        with lock:
            found["runs"][r.key] = result
            write_results(config, found)
        print(f"[done] {r.key} in {(time.time() - started) / 60:.1f} min: " + ", ".join(
            f"{s} {v:.1f}" for s, v in result["exact_match"].items()), flush=True)

    with ThreadPoolExecutor(config.jobs) as pool:
        for future in [pool.submit(one, r) for r in todo]:
            future.result()
    return found


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["score"]:  # run_one's scoring process: score CHECKPOINT OUT STATS_EXAMPLES DEVICE
        checkpoint, out, examples, device = argv[1:]
        Path(out).write_text(json.dumps(score(checkpoint, int(examples), device)) + "\n", encoding="utf-8")
        return 0
    config = parse(LengthStudyConfig, __doc__, argv)
    try:
        read_results(config)
    except ValueError as e:  # another study's results: a usage error, not a traceback
        sys.exit(f"length_study: {e}")
    run(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
