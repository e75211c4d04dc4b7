"""Does an APE model read its source?  The source ablation of fairseq_sparse.ape.source_ablation.

    python scripts/ape_source_ablation.py --path CHECKPOINT --data DATA_DIR [--split valid] --out DIR
"""

import argparse
from pathlib import Path

from fairseq_sparse.ape import source_ablation


def main(argv=None):
    parser = argparse.ArgumentParser(description=source_ablation.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", type=Path, required=True,
                        help="an ape checkpoint (bert_ape or dual_source_transformer)")
    parser.add_argument("--data", type=Path, required=True,
                        help="its data directory: the SPLIT triplets and the tokenizer kept with them")
    parser.add_argument("--split", default="valid", help="which split's triplets (default: valid)")
    parser.add_argument("--out", type=Path, required=True, help="where the ablation splits and the results go")
    parser.add_argument("--max-tokens", type=int, default=4000, help="tokens per validation batch")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args(argv)
    source_ablation.run(args)


if __name__ == "__main__":
    main()
