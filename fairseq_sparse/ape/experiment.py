"""APE on real WMT triplets: doing nothing, the dual-source transformer, ``bert_ape``
from random weights and from the BERT, each trained system with plain beam search and
with its conservativeness and keep-the-MT gate tuned on dev (``scripts/ape_experiment.py``
is its command line).

Domains (../shared/data/ape): ``pharma``, WMT17 APE de-en (25K triplets, good MT);
``it``, WMT16/17 APE en-de, IT (16,068 triplets of the seed paper's own training
data, phrase-based MT).  The last --held-out (1,000) triplets are the test split, the
--held-out before them the dev split (``valid``), the rest train.  Tuning sees dev
only (fairseq_sparse.ape.tuning, fairseq-sparse-tune-ape: one beam pass per --conservativeness value, the
margin gate's margins, each with every edit limit, applied to what it scored); the test split is decoded with plain beam
search, with the chosen values and with the best values of a gate not chosen (so that
the gates are compared where no choice was made), never used to choose.

Scoring: TER (tercom settings) and BLEU (``-tok none``), with sacrebleu's signatures;
modified / improved / deteriorated count test sentences whose output differs from the
MT, and of those whose sentence TER went down / up.  With an uncased BERT (MiniLM) a
model writes its output lowercased and without accents, so every row, doing nothing
included, is scored on the same spelling: the BERT tokenizer's spelling of the
output, the MT and the reference (lowercased, accents removed; the data's
tokenisation is kept).  Where the output is the MT (kept by the gate or copied by the
beam) it is the MT's own text before that spelling.

Training defaults are the authors' published configuration (the README of
deep-spin/OpenNMT-APE) in fairseq's terms: 50,000 updates of 2 x 512 tokens; Adam
with betas (0.9, 0.999), eps 1e-6, decoupled weight decay 0.01, gradients clipped to
norm 1; learning rate 5e-5 warmed up linearly over 5,000 updates then decayed
linearly to 0 (``polynomial_decay``, power 1); label smoothing and dropout 0.1;
decoder self-attention shared with the encoder's (``share_self_attn``).  Their
running average of the weights is left out: the last checkpoint post-edits.  The
dual-source transformer (``dual_source_transformer``, Junczys-Dowmunt & Grundkiewicz
2018, randomly initialised) trains with the same optimiser and budget, at
--dual-source-layers and --dual-source-dim.

Run again with a larger budget, each system goes on from its last checkpoint
(``--systems bert`` resumes only that one; the others are reported from what their
earlier runs left in --out: post-edits, tuning and ``trained.json``).  Updates,
target tokens and training wall time add up over resumed runs.

On a leased GPU, whose time is capped, ``--max-update auto --stop-time-hours H``
fits the schedule to the cap: a probe of --probe-updates (100; same model, batch
and precision; nothing saved) measures the device's updates per second, and the linear
decay is set to reach 0 after the updates that 90% of H allows (checkpoint saves and
validation, which the probe does not time, take part of the rest: they are made about
every 90 s of training at the probe's pace, and where training stops, rather than at
every epoch's end).  ``--warmup 10%`` then warms up over a tenth of them.  The size is
chosen once per system and kept in ``trained.json``, so a resumed run keeps its schedule.  ``--amp`` trains in fairseq's
mixed precision (float16 products on CUDA, bfloat16 on CPU: docs/stack.md; float32 weights);
the checkpoint's weights stay float32 and decoding is float32.  ``--tf32`` keeps float32 training but lets its
matrix products run on tensor cores (TF32), for a GPU run whose pace its products set.

``--seeds N`` trains each system N times (fairseq's ``--seed`` 1 to N; seed 1 in
--out/SYSTEM, seed k in --out/SYSTEM/seed-k), all members at once (on a GPU they share
it, and with ``--max-update auto`` their probes run together, so each schedule is sized
to the shared pace), then tunes and decodes with their ensemble, as ``fairseq-generate
--path a.pt:b.pt`` would: probabilities averaged at every step, and the gate scores the
MT by the same average.  The table then gives each member's updates, all members'
target tokens together and the wall time of the longest.
"""

import json
import time
from concurrent.futures import ThreadPoolExecutor

from ..experiments import FAIRSEQ_TRAIN, PLUGIN_DIR, epoch_metrics, interval_metrics, run_logged, training_env
from ..markdown import table as markdown_table
from . import tuning
from .triplets import held_out, read_corpus, read_lines, read_triplets, write_triplets

# How the table names a gate whose best on dev was not the choice.
GATE_NAMES = {"margin": "margin gate", "margin_edits": "margin gate with an edit limit"}
SYSTEMS = {  # name: (table label, fairseq-train arguments of its own)
    "dual_source": ("dual_source_transformer", ["--arch", "dual_source_transformer"]),
    "random": ("bert_ape, random initialisation",
               ["--arch", "bert_ape", "--encoder-init", "random", "--decoder-init", "random"]),
    "bert": ("bert_ape, BERT initialisation", ["--arch", "bert_ape"]),
}
# --max-update auto: the probe is timed over the last four fifths of its updates (its
# first fifth holds the start-up and the first kernels' compilation), and the sized
# schedule is planned to fill this share of the time cap.
AUTO_SHARE = 0.9
# --max-update auto: a checkpoint (and a dev validation) about every this many seconds of
# training, counted in updates at the probe's pace, instead of at every epoch's end and
# every 250 updates: at a GPU's large batches an epoch lasts seconds, and saves and
# validations at every epoch's end, which the probe does not time, would stop training
# well before the schedule's end (docs/notes/ape.md#a-time-capped-gpu).  An interrupted
# run loses at most this much.
AUTO_SAVE_SECONDS = 90
# fairseq's --save-interval and --validate-interval count epochs: one no run reaches.
NO_EPOCH_INTERVAL = 10**6


def split_corpus(corpus, data, held):
    """train = all but the last 2 x held triplets; valid = the held before the last held; test = the last held."""
    rest, test = held_out(read_corpus(corpus, " (see ../shared/data/README or data_prep/)"), held, "--held-out")
    train, dev = held_out(rest, held, "--held-out")
    for split, texts in (("train", train), ("valid", dev), ("test", test)):
        write_triplets(data, split, texts)
    return {split: len(texts["src"]) for split, texts in (("train", train), ("valid", dev), ("test", test))}


def system_arguments(system, args):
    own = list(SYSTEMS[system][1])
    if system == "dual_source":
        dim = args.dual_source_dim
        own += ["--encoder-layers", args.dual_source_layers, "--decoder-layers", args.dual_source_layers,
                "--encoder-embed-dim", dim, "--decoder-embed-dim", dim, "--encoder-ffn-embed-dim", 4 * dim,
                "--decoder-ffn-embed-dim", 4 * dim, "--dropout", "0.1"]
    else:
        own += ["--bert-layers", args.bert_layers]
        if args.share_self_attn_with_encoder:
            own.append("--share-self-attn-with-encoder")
    return own


def fairseq_train(system, data, args, save, max_update, warmup, extra=(), seed=1):
    """The fairseq-train command line of one system (one member of it: ``seed``)."""
    schedule = ["--lr-scheduler", args.lr_scheduler]
    if args.lr_scheduler == "polynomial_decay":
        # fairseq's defaults, power 1 down to 0, are BertAdam's warmup_linear.
        schedule += ["--total-num-update", max_update]
    device = ["--cpu"] if args.device == "cpu" else []
    return [*FAIRSEQ_TRAIN, data, "--user-dir", PLUGIN_DIR, "--task", "ape",
            "--bert-model", args.bert_model, *system_arguments(system, args),
            "--attention-normalizer", args.attention_normalizer, "--optimizer", "adam", "--adam-betas", args.adam_betas,
            "--adam-eps", args.adam_eps, "--weight-decay", args.weight_decay, "--clip-norm", args.clip_norm,
            "--lr", args.lr, *schedule, "--warmup-updates", warmup,
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", args.max_tokens,
            "--mt-mask-prob", args.mt_mask_prob,
            "--update-freq", args.update_freq, "--max-update", max_update, "--seed", seed, *device,
            *(["--amp"] if args.amp else []), "--num-workers", "0", "--save-dir", save, "--log-format", "simple",
            *extra]


def updates_per_second(system, data, args, save, seed):
    """This device's training speed for one member of a system: --probe-updates updates from
    its start (nothing saved, no validation), timed after the first of five log intervals.
    The members of an ensemble probe together, so each measures the pace it will train at."""
    probe = save / "probe"
    probe.mkdir(parents=True, exist_ok=True)
    interval = args.probe_updates // 5
    proc = run_logged(fairseq_train(system, data, args, probe, args.probe_updates, interval,
                                    ["--no-save", "--disable-validation", "--log-interval", interval], seed),
                      probe / "train.log", env=training_env(args.device, args.seeds, args.tf32))
    rates = [entry["ups"] for entry in interval_metrics(proc.stdout)[1:] if entry.get("ups", 0) > 0]
    if not rates:
        raise SystemExit(f"--max-update auto: the probe logged no timed interval; its log is {probe / 'train.log'}")
    return len(rates) / sum(1 / r for r in rates)  # the intervals are equally long in updates


def member_dir(args, system, seed):
    """Where one member of a system trains: seed 1 in --out/SYSTEM (a single model's place),
    seed k in --out/SYSTEM/seed-k."""
    return args.out / system if seed == 1 else args.out / system / f"seed-{seed}"


def train_system(system, data, args):
    """Train (or resume) each of the system's --seeds members, all at once (on a GPU they share
    it; their probes too run together); the totals of the one model, or of the ensemble:
    updates of each member, target tokens of all, wall time of the longest."""
    seeds = range(1, args.seeds + 1)
    with ThreadPoolExecutor(max_workers=args.seeds) as pool:
        members = list(pool.map(lambda seed: train(system, data, args, seed), seeds))
    if len(members) == 1:
        return members[0]
    return {"updates": min(m["updates"] for m in members), "tokens": sum(m["tokens"] for m in members),
            "seconds": max(m["seconds"] for m in members), "device": members[0]["device"], "members": len(members)}


def train(system, data, args, seed=1):
    """Train (or resume) one member of a system; its totals over every run go to its trained.json."""
    save = member_dir(args, system, seed)
    save.mkdir(parents=True, exist_ok=True)
    record = save / "trained.json"
    totals = json.loads(record.read_text()) if record.is_file() else {"updates": 0, "tokens": 0, "seconds": 0.0}
    name = system if args.seeds == 1 else f"{system} (seed {seed})"
    if args.max_update != "auto":
        totals["max_update"] = args.max_update
    elif "max_update" not in totals:  # sized once: a resumed run keeps the schedule it started with
        rate = updates_per_second(system, data, args, save, seed)
        totals["probe_updates_per_second"] = round(rate, 3)
        totals["max_update"] = max(1, int(rate * args.stop_time_hours * 3600 * AUTO_SHARE))
        print(f"{name}: {rate:.2f} updates/s in the probe; the schedule ends at {totals['max_update']} updates",
              flush=True)
    max_update = totals["max_update"]
    warmup, percent = args.warmup
    warmup = round(max_update * warmup / 100) if percent else warmup
    if max_update and totals["updates"] >= max_update:
        # fairseq would make one more update before it noticed: the schedule is done.
        print(f"{name}: its schedule ended at {max_update} updates; not trained further", flush=True)
        return totals
    # A wall-clock cap (a leased GPU's time); the checkpoint is saved where it stops.
    stop = ["--stop-time-hours", args.stop_time_hours] if args.stop_time_hours > 0 else []
    started = time.time()
    board = args.out / "tensorboard" / (system if seed == 1 else f"{system}-seed-{seed}")
    # fairseq goes on from checkpoint_last: the log goes on too, keeping the earlier runs' epochs.
    resuming = (save / "checkpoint_last.pt").is_file()
    proc = run_logged(fairseq_train(system, data, args, save, max_update, warmup, [
        *stop, *saving(args, totals), "--no-epoch-checkpoints", "--keep-interval-updates", "1", "--log-interval", "50",
        "--tensorboard-logdir", board], seed), save / "train.log", env=training_env(args.device, args.seeds, args.tf32), append=resuming)
    seconds = time.time() - started
    epochs = epoch_metrics(proc.stdout).get("train", [])
    previous = totals["updates"]
    for epoch in epochs:  # wpb is target tokens per update, averaged over the epoch's updates of this run
        totals["tokens"] += int(epoch["wpb"] * (epoch["num_updates"] - previous))
        previous = epoch["num_updates"]
    if epochs:
        totals["updates"] = int(previous)
        totals["seconds"] += seconds
    totals["device"] = args.device_name
    record.write_text(json.dumps(totals, indent=1) + "\n")
    return totals


def saving(args, totals):
    """fairseq-train's checkpoint and validation intervals: with --max-update auto, every
    AUTO_SAVE_SECONDS of training at the probe's pace and where training stops; otherwise at
    every epoch's end and every 250 updates."""
    rate = totals.get("probe_updates_per_second")
    if args.max_update != "auto" or rate is None:
        return ["--save-interval-updates", "250"]
    return ["--save-interval-updates", max(1, round(rate * AUTO_SAVE_SECONDS)), "--save-interval", NO_EPOCH_INTERVAL,
            "--validate-interval", NO_EPOCH_INTERVAL]


def run(args, title):
    """The experiment on ``args`` (the script's options, checked; ``args.corpus`` the triplets'
    prefix, ``args.device_name`` as the table names the device); ``title`` names the data in
    results.md."""
    data = args.out / "data"
    sizes = split_corpus(args.corpus, data, args.held_out)
    margins = tuning.parse_margins(args.keep_mt_margin) if args.keep_mt_margin else tuning.DEFAULT_MARGINS
    max_edits = tuning.parse_max_edits(args.keep_mt_max_edits) if args.keep_mt_max_edits else tuning.DEFAULT_MAX_EDITS
    for system in args.systems:
        totals = train_system(system, data, args)
        save = args.out / system
        path = ":".join(str(member_dir(args, system, seed) / "checkpoint_last.pt") for seed in range(1, args.seeds + 1))
        editor_args = dict(path=path, data=data, device=args.device, beam=args.beam, max_len_b=args.max_len_b)
        tuned = tuning.tune(split="valid", grid_c=args.conservativeness, grid_m=margins, grid_e=max_edits,
                            out=save / "tuning", **editor_args)
        settings = {"plain": (0.0, None, None), "tuned": tuning.setting_of(tuned)}
        # Each gate's best on dev too, where it is not the choice: the gates compared on test.
        for gate in ("margin", "margin_edits"):
            best = tuned["by_gate"].get(gate)
            if best and tuning.setting_of(best) not in settings.values():
                settings[f"best_{gate}"] = tuning.setting_of(best)
        tuning.decode_test(split="test", settings=settings, out=save / "test", trained=totals, **editor_args)
    write_table(args, title, sizes)


def write_table(args, title, sizes):
    """results.md: every system's test rows that --out holds, beside doing nothing."""
    data = args.out / "data"
    texts = read_triplets(data, "test")
    scorer = tuning.Scorer(data / "tokenizer", texts["mt"], texts["pe"])
    rows = [("do nothing (MT as is)", scorer.score(texts["mt"]), None, None)]
    ensembles = False
    for system, (label, _) in SYSTEMS.items():
        result = args.out / system / "test" / "results.json"
        if not result.is_file():
            continue
        done = json.loads(result.read_text())
        members = (done["trained"] or {}).get("members", 1)
        ensembles |= members > 1
        model = label if members == 1 else f"{label}, ensemble of {members}"
        for name, run in done["runs"].items():
            hyps = list(read_lines(args.out / system / "test" / f"{name}.txt", allow_empty=True))
            setting = ("plain beam search" if name == "plain" else
                       tuning.setting_name(*tuning.setting_of(run))
                       + (" (chosen on dev)" if name == "tuned" else
                          f" ({GATE_NAMES[name.removeprefix('best_')]}: best on dev, not chosen)"))
            rows.append((f"{model}, {setting}", scorer.score(hyps), run["kept"], done["trained"]))
    lines = [f"# APE on {title}: doing nothing, three systems, plain and conservative decoding", "",
             f"Train {sizes['train']} triplets, dev {sizes['valid']} (the {args.held_out} before the last "
             f"{args.held_out}), test {sizes['test']} (the last). C (--conservativeness) and the gate, M "
             f"(--keep-mt-margin) with E (--keep-mt-max-edits), were chosen on dev only (each "
             "system's `tuning/`); "
             f"beam {args.beam}. {scorer.spelling}. Kept: test sentences whose output is the MT (by the gate or by "
             "the beam)." + (" An ensemble's updates are each member's, its target tokens all members' together, "
                             "its wall time the longest member's (they train at once)." if ensembles else ""), "",
             markdown_table(
                 ["system", "TER", "BLEU", "modified", "improved", "deteriorated", "kept", "updates", "target tokens",
                  "training wall time", "device"],
                 [[name, f"{ter:.2f}", f"{bleu:.2f}", effects["modified"], effects["improved"],
                   effects["deteriorated"], "–" if kept is None else kept,
                   *([trained["updates"], f"{trained['tokens'] / 1e6:.2f}M", f"{trained['seconds'] / 60:.0f} min",
                      trained["device"]] if trained else ["–"] * 4)]
                  for name, (ter, bleu, effects), kept, trained in rows])]
    lines += ["", f"TER signature: `{scorer.signatures[0]}`; BLEU signature: `{scorer.signatures[1]}`",
              "", "Training settings: see each system's train.log (fairseq prints its whole configuration)."]
    (args.out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
