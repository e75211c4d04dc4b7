"""Does an APE model read its source?  The loss of a split's reference post-edits with each
sentence's src as given, and with it swapped for another sentence's src of about the same
length; and the same two for the MT itself as the target (``scripts/ape_source_ablation.py``
is its command line).

A model that uses the source loses information when it gets the wrong one, so the post-edits
cost it more bits: the difference, in bits per post-edit token, is what the right source is
worth to it (0: the model post-edits from the MT alone, however it was trained).  The MT rows
say how much the model prefers copying the MT: what the keep-the-MT gate compares.

The losses are fairseq-validate's own (``nll_loss``: cross-entropy of the reference in bits per
target token, without label smoothing), on four splits written to DIR: ``SPLIT``,
``SPLIT_src_swapped`` (sources exchanged in pairs of neighbours by length, so that no sentence
keeps its own and the lengths stay about the same), ``SPLIT_mt_as_target`` and
``SPLIT_src_swapped_mt_as_target``.  DIR gets ``ablation.json`` and ``ablation.md``.
"""

import json
import re
import shutil

from ..experiments import FAIRSEQ_VALIDATE, PLUGIN_DIR, run_logged
from ..markdown import table as markdown_table
from .triplets import read_corpus, write_triplets

CONDITIONS = {  # split name suffix: (the target, whether each src is another sentence's)
    "": ("pe", False),
    "_src_swapped": ("pe", True),
    "_mt_as_target": ("mt", False),
    "_src_swapped_mt_as_target": ("mt", True),
}


def swap_partners(lengths):
    """A permutation without fixed points that pairs each sentence with a neighbour in length
    order (the odd one out joins the last pair in a 3-cycle); deterministic."""
    n = len(lengths)
    if n < 2:
        raise SystemExit(f"source ablation: {n} sentence(s); at least 2 are needed to swap sources")
    order = sorted(range(n), key=lambda i: (lengths[i], i))
    partner = list(range(n))
    for a, b in zip(order[0::2], order[1::2]):
        partner[a], partner[b] = b, a
    if n % 2:
        a, b, c = order[-3:]
        partner[a], partner[b], partner[c] = b, c, a
    return partner


def ablation_splits(texts, split):
    """{split name: {field: lines}} of the four conditions."""
    partner = swap_partners([len(line.split()) for line in texts["src"]])
    swapped = [texts["src"][j] for j in partner]
    return {split + suffix: {"src": swapped if swap else texts["src"], "mt": texts["mt"], "pe": texts[target]}
            for suffix, (target, swap) in CONDITIONS.items()}


def validate_losses(log_text):
    """{subset: nll_loss} from fairseq-validate's output (bits per target token)."""
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r"valid on '([^']+)' subset \|.*?\| nll_loss ([0-9.]+)", log_text)}


def run(args):
    """The experiment on ``args`` (the script's options, checked)."""
    if not args.path.is_file():
        raise SystemExit(f"--path {args.path}: no such checkpoint")
    if not (args.data / "tokenizer").is_dir():
        raise SystemExit(f"--data {args.data}: no tokenizer kept there (train or generate with --task ape first)")
    texts = read_corpus(args.data / args.split, f" (--data {args.data} --split {args.split})")
    data = args.out / "data"
    data.mkdir(parents=True, exist_ok=True)
    if not (data / "tokenizer").exists():
        shutil.copytree(args.data / "tokenizer", data / "tokenizer")
    splits = ablation_splits(texts, args.split)
    for name, triplets in splits.items():
        write_triplets(data, name, triplets)
    proc = run_logged([*FAIRSEQ_VALIDATE, data, "--user-dir", PLUGIN_DIR, "--task", "ape",
                       "--path", args.path, "--valid-subset", ",".join(splits), "--max-tokens", args.max_tokens,
                       "--criterion", "label_smoothed_cross_entropy", "--num-workers", "0",
                       *(["--cpu"] if args.device == "cpu" else [])], args.out / "validate.log")
    losses = validate_losses(proc.stdout + proc.stderr)
    missing = [name for name in splits if name not in losses]
    if missing:
        raise SystemExit(f"fairseq-validate reported no loss for {', '.join(missing)}; see {args.out / 'validate.log'}")
    s = args.split
    result = {"checkpoint": str(args.path), "split": s, "sentences": len(texts["src"]),
              "bits_per_token": {name: losses[name] for name in splits},
              "source_worth_bits_per_pe_token": round(losses[f"{s}_src_swapped"] - losses[s], 4),
              "source_worth_bits_per_mt_token": round(losses[f"{s}_src_swapped_mt_as_target"]
                                                      - losses[f"{s}_mt_as_target"], 4)}
    (args.out / "ablation.json").write_text(json.dumps(result, indent=1) + "\n")
    rows = [["MT" if target == "mt" else "post-edit", "another sentence" if swap else "its own",
             f"{losses[s + suffix]:.4f}"] for suffix, (target, swap) in CONDITIONS.items()]
    (args.out / "ablation.md").write_text("\n".join([
        f"Source ablation of {args.path} on {len(texts['src'])} {s} triplets of {args.data} (fairseq-validate's "
        "nll_loss, bits per target token):", "",
        markdown_table(["target", "src", "bits per token"], rows), "",
        f"What the right source is worth: {result['source_worth_bits_per_pe_token']:+.4f} bits per post-edit token, "
        f"{result['source_worth_bits_per_mt_token']:+.4f} per MT token.", ""]))
    print((args.out / "ablation.md").read_text(), end="")
