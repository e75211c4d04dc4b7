"""Softmax vs 1.5-entmax vs alpha-entmax transformers on Multi30k en-de, side by side.

    python scripts/multi30k_sparse_attention.py --out outputs/multi30k [--max-epoch 4] [--device cuda]

Prepares the data (data_prep/multi30k.sh: sentencepiece, fairseq-preprocess) unless
--data points at a binarised directory, trains one ``entmax_transformer`` per
attention normaliser with identical settings and seed, translates
``test_2016_flickr`` (beam 5) and writes ``results.md``:

- BLEU of the detokenised output against the raw references (sacrebleu, with its signature);
- training tokens per second (fairseq's ``wps``, mean over epochs) relative to softmax, same run;
  rerunning the script on a finished ``--out`` trains nothing and only re-evaluates;
- attention density per site (fraction of allowed keys with nonzero weight, valid split);
- mean learned alpha per site, how far training moved any head's alpha from its
  initialisation, and the full attention report of the alpha-entmax model.
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import sacrebleu
import torch
from cli_helpers import at_least, generate_hypotheses

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NORMALIZERS = ("softmax", "entmax15", "alpha_entmax")


def run(cmd, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def train_command(data, out, normalizer, args):
    save = out / normalizer
    save.mkdir(parents=True, exist_ok=True)
    limit = ["--stop-time-hours", args.stop_time_hours] if args.stop_time_hours else []
    return [BIN / "fairseq-train", data, "--user-dir", REPO / "fairseq_sparse", "--task", "translation",
            "--arch", "entmax_transformer", "--attention-normalizer", normalizer,
            "--encoder-layers", args.layers, "--decoder-layers", args.layers,
            "--encoder-embed-dim", args.dim, "--decoder-embed-dim", args.dim,
            "--encoder-ffn-embed-dim", 2 * args.dim, "--decoder-ffn-embed-dim", 2 * args.dim,
            "--encoder-attention-heads", args.heads, "--decoder-attention-heads", args.heads,
            "--share-all-embeddings", "--dropout", "0.2", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "1e-3",
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "400", "--max-tokens", "4096",
            "--max-epoch", args.max_epoch, *limit, "--seed", "1", *device_flags(args), "--num-workers", "0",
            "--no-epoch-checkpoints",
            "--save-dir", save, "--tensorboard-logdir", out / "tensorboard" / normalizer,
            "--log-format", "json", "--log-file", save / "train.log"]


def train_all(data, out, args):
    """Train one model per normaliser, ``--jobs`` at a time (concurrent runs share the
    device, so their tokens/s are only comparable with each other)."""
    commands = [train_command(data, out, n, args) for n in args.normalizers]
    for start in range(0, len(commands), args.jobs):
        batch = commands[start:start + args.jobs]
        procs = []
        for cmd in batch:
            print("+", " ".join(map(str, cmd)), flush=True)
            procs.append(subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL))
        for cmd, proc in zip(batch, procs):
            if proc.wait() != 0:
                raise SystemExit(f"training failed ({proc.returncode}): see {cmd[cmd.index('--log-file') + 1]}")


def training_summary(out, normalizer):
    """(best checkpoint, mean training tokens/s over epochs, epochs trained)."""
    save = out / normalizer
    # One summary per epoch; fairseq may write a line more than once, and a rerun
    # of a finished experiment resumes (trains nothing) and reuses the earlier log.
    wps = {}
    for line in (save / "train.log").read_text().splitlines():
        if '"train_wps"' in line:
            record = json.loads(line[line.index("{"):])
            wps[record["epoch"]] = float(record["train_wps"])
    return save / "checkpoint_best.pt", statistics.mean(wps.values()), len(wps)


def device_flags(args):
    return ["--cpu"] if args.device == "cpu" else []


def device_name(args):
    if args.device == "cpu":
        return f"CPU ({torch.get_num_threads()} threads)"
    return torch.cuda.get_device_name()


def bleu(data, checkpoint, references, args):
    gen = subprocess.run(
        [str(BIN / "fairseq-generate"), str(data), "--user-dir", str(REPO / "fairseq_sparse"), "--path", str(checkpoint),
         "--gen-subset", "test", "--beam", "5", "--post-process", "sentencepiece", *device_flags(args),
         "--max-tokens", "8000"],
        check=True, capture_output=True, text=True).stdout
    hyps = generate_hypotheses(gen)
    refs = references.read_text(encoding="utf-8").splitlines()
    # Should fairseq-generate leave a sentence out (it did, before compat/batching.py),
    # it is scored as an empty output and the count is reported, never dropped.
    missing = len(refs) - len(hyps)
    metric = sacrebleu.BLEU()
    score = metric.corpus_score([hyps.get(i, "") for i in range(len(refs))], [refs])
    return score.score, str(metric.get_signature()), missing


def attention_summary(checkpoint, data):
    from fairseq_sparse.attention.report import collect, load, per_head

    model, task = load(checkpoint, data)
    acc, _, _ = collect(model, task, "valid", 1014, set())
    density = per_head(acc, "density")
    learned, changes = model.head_alphas(), model.head_alpha_changes()
    by_site = {}
    for site in ("encoder", "decoder", "cross"):
        vals = [x for (s, _), v in density.items() if s == site for x in v]
        alphas = [float(a) for (s, _), v in learned.items() if s == site for a in v]
        moved = max(float(c.abs().max()) for sl, c in changes.items() if sl[0] == site)
        by_site[site] = (statistics.mean(vals), statistics.mean(alphas), moved)
    return by_site


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "multi30k",
                        help="data, checkpoints, tensorboard logs, the alpha-entmax attention report and "
                             "results.md (default: outputs/multi30k)")
    parser.add_argument("--data", type=Path, help="binarised data (default: prepare it under OUT/data)")
    parser.add_argument("--max-epoch", type=at_least(1), default=4,
                        help="training epochs per model (default: %(default)s)")
    parser.add_argument("--dim", type=int, default=128, help="embedding width; feed-forward 2x (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=2, help="encoder and decoder layers (default: %(default)s)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads per layer (default: %(default)s)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="train and translate on CPU or on the (first) CUDA GPU")
    parser.add_argument("--normalizers", nargs="+", choices=NORMALIZERS, default=list(NORMALIZERS),
                        help="attention normalisers to compare, one model each (default: all)")
    parser.add_argument("--jobs", type=at_least(1), default=1,
                        help="models trained at the same time (default: %(default)s)")
    parser.add_argument("--stop-time-hours", type=float, help="also stop each training after this wall time")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    prepared = args.out / "data"
    if args.data is None:
        if not (prepared / "bin" / "dict.en.txt").exists():
            run(["bash", REPO / "data_prep" / "multi30k.sh", prepared])
        args.data = prepared / "bin"
    references = args.data.parent / "test.raw.de"

    train_all(args.data, args.out, args)
    rows = {}
    for normalizer in args.normalizers:
        checkpoint, wps, epochs = training_summary(args.out, normalizer)
        score, signature, missing = bleu(args.data, checkpoint, references, args)
        rows[normalizer] = dict(bleu=score, wps=wps, epochs=epochs, missing=missing,
                                attention=attention_summary(checkpoint, args.data))
    if "alpha_entmax" in rows:
        run([BIN / "fairseq-sparse-attention-report", "--path", args.out / "alpha_entmax" / "checkpoint_best.pt",
             "--data", args.data, "--out", args.out / "alpha_entmax_report", "--sentences", "0", "1", "2"])

    limit = f" (or {args.stop_time_hours} h each)" if args.stop_time_hours else ""
    together = f"; {args.jobs} trained at a time on the one device" if args.jobs > 1 else ""
    lines = [
        "# Multi30k en-de: softmax vs 1.5-entmax vs alpha-entmax attention", "",
        f"Model: entmax_transformer, {args.layers}+{args.layers} layers, {args.dim} wide, {args.heads} heads, "
        f"shared embeddings, sentencepiece 8k; at most {args.max_epoch} epochs{limit}, seed 1, "
        f"{device_name(args)}{together}. Test: test_2016_flickr, beam 5.", "",
        f"sacrebleu signature: `{signature}`", "",
        "| attention | BLEU | epochs | train tokens/s vs softmax | density enc / dec / cross | mean alpha enc / dec / cross "
        "| largest alpha change since initialisation enc / dec / cross |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    base = rows[args.normalizers[0]]["wps"] if "softmax" not in rows else rows["softmax"]["wps"]
    for normalizer, r in rows.items():
        att = r["attention"]
        lines.append(
            f"| {normalizer} | {r['bleu']:.2f} | {r['epochs']} | {r['wps'] / base:.2f} ({r['wps']:.0f} tok/s) | "
            + " / ".join(f"{att[s][0]:.3f}" for s in ("encoder", "decoder", "cross")) + " | "
            + " / ".join(f"{att[s][1]:.2f}" for s in ("encoder", "decoder", "cross")) + " | "
            # NaN: a checkpoint written before the initial alphas were kept.
            + " / ".join(f"{att[s][2]:.3f}" if att[s][2] == att[s][2] else "unknown"
                         for s in ("encoder", "decoder", "cross")) + " |")
    for normalizer, r in rows.items():
        if r["missing"]:
            lines.append(f"\n{normalizer}: fairseq-generate gave no output for {r['missing']} test sentences "
                         "(scored as empty).")
    if "alpha_entmax" in rows:
        lines += ["", "Alpha-entmax attention report: [alpha_entmax_report/report.md](alpha_entmax_report/report.md)"]
    (args.out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
