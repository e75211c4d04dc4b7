"""Stability of sparsity (Prokhorov et al. 2021, Sec. 6): the average Hoyer of HSVAE and
MAT-VAE over training, for several seeds and several settings of their sparsity
knobs, (alpha, beta) of HSVAE's Beta prior and (psi, lambda) of MAT-VAE.

    python scripts/sentence_vae_stability.py DATA_DIR --out DIR [--seeds 3] [--epochs 10]

The paper's claim: HSVAE's sparsity follows (alpha, beta) and is steady across
seeds; MAT-VAE's is erratic across settings.  Writes ``DIR/stability.png`` (mean and
spread over seeds per setting, per epoch), ``DIR/stability.json`` and prints a
table of the last epoch's average Hoyer and reconstruction.  Runs whose log
already ends its training are collected, not rerun.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cli_helpers import epoch_metrics

REPO = Path(__file__).resolve().parents[1]
# objective -> its two knobs as fairseq-train options
KNOBS = {"hsvae": ("--prior-alpha", "--prior-beta"), "mat_vae": ("--kl-weight", "--mmd-weight")}


def settings(text):
    """"10,1 1,1" -> [(10.0, 1.0), (1.0, 1.0)]"""
    try:
        return [tuple(float(v) for v in pair.split(",")) for pair in text.split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: settings are space-separated pairs like '10,1 1,1'") from None


def run_one(args, objective, setting, seed):
    name = f"{objective}/{setting[0]:g}_{setting[1]:g}_seed{seed}"
    log = args.out / "logs" / f"{name}.log"
    if not (log.is_file() and "done training" in log.read_text(encoding="utf-8")):
        log.parent.mkdir(parents=True, exist_ok=True)
        first, second = KNOBS[objective]
        cmd = [str(Path(sys.executable).parent / "fairseq-train"), str(args.data), "--user-dir",
               str(REPO / "fairseq_sparse"), "--task", "sentence_vae", "--arch", "sentence_vae", "--criterion",
               objective, first, str(setting[0]), second, str(setting[1]), "--latent-dim", str(args.latent_dim),
               "--embed-dim", str(args.embed_dim), "--hidden-dim", str(args.hidden_dim), "--optimizer", "adam",
               "--lr", "1e-3", "--batch-size", "32", "--max-epoch", str(args.epochs), "--seed", str(seed),
               "--num-workers", "0", "--no-save", "--log-format", "simple", "--log-interval", "1000", "--cpu",
               # fairseq probes its save dir even with --no-save: one per run, or concurrent runs collide.
               "--save-dir", str(args.out / "checkpoints" / name)]
        env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // args.jobs)))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        log.write_text(proc.stdout + proc.stderr, encoding="utf-8")
        if proc.returncode != 0:
            raise SystemExit(f"{name} failed; log in {log}:\n{proc.stderr[-2000:]}")
    valid = epoch_metrics(log.read_text(encoding="utf-8")).get("valid", [])
    return objective, setting, seed, valid


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (objective, by_setting) in zip(axes[0], results.items()):
        knobs = "(alpha, beta)" if objective == "hsvae" else "(psi, lambda)"
        for setting, runs in by_setting.items():
            curves = [[epoch["average_hoyer"] for epoch in run] for run in runs]
            n = min(len(c) for c in curves)
            mean = [statistics.mean(c[i] for c in curves) for i in range(n)]
            low = [min(c[i] for c in curves) for i in range(n)]
            high = [max(c[i] for c in curves) for i in range(n)]
            (line,) = ax.plot(range(1, n + 1), mean, marker="o", markersize=3, label=f"{knobs} = {setting}")
            ax.fill_between(range(1, n + 1), low, high, color=line.get_color(), alpha=0.2)
        ax.set_title(f"{objective}: average Hoyer, mean and range over seeds")
        ax.set_xlabel("epoch")
        ax.set_ylabel("average Hoyer (validation)")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="sentence_vae DATA_DIR (train/valid/test.txt)")
    parser.add_argument("--out", type=Path, required=True, help="directory for the runs, tables and plots")
    parser.add_argument("--seeds", type=int, default=3, help="runs per setting, seeds 1..N (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs per run (default: %(default)s)")
    parser.add_argument("--hsvae-settings", type=settings, default=settings("10,1 5,5 1,10"),
                        help="HSVAE (alpha, beta) pairs (default: '10,1 5,5 1,10')")
    parser.add_argument("--mat-vae-settings", type=settings, default=settings("1,1 1,10 0.1,10"),
                        help="MAT-VAE (psi, lambda) pairs (default: '1,1 1,10 0.1,10')")
    parser.add_argument("--latent-dim", type=int, default=32, help="latent code dimensions (default: %(default)s)")
    parser.add_argument("--embed-dim", type=int, default=256, help="word embedding width (default: %(default)s)")
    parser.add_argument("--hidden-dim", type=int, default=512,
                        help="GRU encoder and decoder width (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at the same time (default: %(default)s)")
    args = parser.parse_args(argv)

    grid = [(objective, setting, seed) for objective, pairs in (("hsvae", args.hsvae_settings),
                                                               ("mat_vae", args.mat_vae_settings))
            for setting in pairs for seed in range(1, args.seeds + 1)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        finished = list(pool.map(lambda job: run_one(args, *job), grid))
    results = {}
    for objective, setting, seed, valid in finished:
        if not valid:
            raise SystemExit(f"{objective} {setting} seed {seed}: no validation in its log")
        results.setdefault(objective, {}).setdefault(setting, []).append(valid)
    lines = ["| objective | setting | average Hoyer (last epoch) | spread over seeds | reconstruction |",
             "|---|---|---|---|---|"]
    for objective, by_setting in results.items():
        for setting, runs in by_setting.items():
            last = [run[-1] for run in runs]
            hoyer = [epoch["average_hoyer"] for epoch in last]
            spread = statistics.stdev(hoyer) if len(hoyer) > 1 else 0.0
            lines.append(f"| {objective} | {setting} | {statistics.mean(hoyer):.3f} | {spread:.3f} | "
                         f"{statistics.mean(e['reconstruction'] for e in last):.2f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "stability.json").write_text(json.dumps(
        {o: {f"{s[0]:g},{s[1]:g}": runs for s, runs in by.items()} for o, by in results.items()}, indent=1),
        encoding="utf-8")
    plot(results, args.out / "stability.png")
    print("\n".join(lines))
    print(f"\nplot: {args.out / 'stability.png'}")


if __name__ == "__main__":
    main()
