"""TER and BLEU of automatic post-edits next to the do-nothing baseline (MT as is).

    fairseq-sparse-score-ape --hyp HYP --mt test.mt --pe test.pe [--fairseq-output] [--lowercase]

HYP has one post-edit per line, or is the output of ``fairseq-generate`` with
``--fairseq-output`` (its ``D-`` lines, put back in corpus order).  As in the WMT
APE shared tasks: TER case-sensitive, no normalisation, on the tokenised text
(sacrebleu's TER, the ``ter`` scorer), and BLEU on the same text with
``-tok none``.  ``--lowercase`` scores lowercased text (for uncased BERT models,
whose output has no case); it applies to every row alike.

Below them, the sentence-level effect of the edits (modified, improved,
deteriorated, precision), as the WMT APE tasks also report.  With ``--bert-model``
an edit is what differs from the MT as that BERT spells it (an uncased BERT drops
accents: its exact copy of the MT is then no edit).
"""

import argparse
import sys

from ..experiments import generate_hypotheses
from ..modules.bert import load_bert_tokenizer
from ..text import read_lines as read_text_lines
from .bert_dictionary import model_spelling
from .ter import ape_scores, edit_effects


def read_lines(path, allow_empty=False):
    """The lines of a file (:func:`fairseq_sparse.text.read_lines`); a missing, empty or
    undecodable file, or an empty line, stops with its name and line."""
    try:
        return list(read_text_lines(path, allow_empty))
    except (OSError, ValueError) as e:
        raise SystemExit(str(e)) from None


def report_empty(hyps, path):
    """Say on stderr which post-edits are empty: a system that printed nothing is scored as
    such, never silently."""
    empty = [i + 1 for i, h in enumerate(hyps) if not h.strip()]
    if empty:
        print(f"warning: {len(empty)} of {len(hyps)} post-edits in {path} are empty (lines {empty[:10]}"
              f"{', ...' if len(empty) > 10 else ''}); they are scored as empty sentences", file=sys.stderr)


def read_fairseq_output(path, expected):
    hyps = generate_hypotheses("\n".join(read_lines(path, allow_empty=True)))
    missing = [i for i in range(expected) if i not in hyps]
    if missing:
        raise SystemExit(f"{path}: no D- line for {len(missing)} of {expected} sentences (first: {missing[:5]})")
    return [hyps[i] for i in range(expected)]


def main(argv=None):
    """The command line: prints the table and the signatures (the rows are ``score``'s)."""
    score(argv)


def score(argv=None):
    """{"do-nothing (MT)": ape_scores, "post-edited": ape_scores} of the command line ``argv``,
    after printing them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hyp", required=True, help="post-edits, one per line (see --fairseq-output)")
    parser.add_argument("--mt", required=True, help="the MT output the post-edits start from (the do-nothing baseline)")
    parser.add_argument("--pe", required=True, help="the reference post-edits")
    parser.add_argument("--fairseq-output", action="store_true", help="HYP is fairseq-generate's output")
    parser.add_argument("--lowercase", action="store_true", help="score lowercased text (uncased models)")
    parser.add_argument("--bert-model", help="the system's BERT (name or directory): count edits against the MT "
                                             "as its vocabulary spells it")
    args = parser.parse_args(argv)
    refs, mts = read_lines(args.pe), read_lines(args.mt)
    if len(refs) != len(mts):
        raise SystemExit(f"{args.pe} has {len(refs)} lines but {args.mt} has {len(mts)}")
    hyps = read_fairseq_output(args.hyp, len(refs)) if args.fairseq_output else read_lines(args.hyp, True)
    if len(hyps) != len(refs):
        raise SystemExit(f"{args.hyp} has {len(hyps)} lines but {args.pe} has {len(refs)}")
    report_empty(hyps, args.hyp)
    unedited = mts
    if args.bert_model:
        try:
            unedited = model_spelling(load_bert_tokenizer(args.bert_model), mts)
        except (FileNotFoundError, ValueError) as e:
            raise SystemExit(str(e)) from None
    if args.lowercase:
        refs, mts, hyps, unedited = ([x.lower() for x in xs] for xs in (refs, mts, hyps, unedited))
    rows = {"do-nothing (MT)": ape_scores(mts, refs), "post-edited": ape_scores(hyps, refs)}
    print(f"{'':18s} {'TER':>7s} {'BLEU':>7s}")
    for name, (ter, _, bleu, _) in rows.items():
        print(f"{name:18s} {ter:7.2f} {bleu:7.2f}")
    effects = edit_effects(hyps, unedited, refs)
    print(f"edits: modified {effects['modified']} of {effects['sentences']} sentences, improved "
          f"{effects['improved']}, deteriorated {effects['deteriorated']} (sentence TER against the MT's); "
          f"precision {100 * effects['precision']:.1f}%")
    _, ter_sig, _, bleu_sig = rows["post-edited"]
    print(f"TER signature:  {ter_sig}{' (lowercased)' if args.lowercase else ''}")
    print(f"BLEU signature: {bleu_sig}{' (lowercased)' if args.lowercase else ''}")
    return rows


if __name__ == "__main__":
    main()
