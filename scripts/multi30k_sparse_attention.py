"""The Multi30k experiment: softmax vs 1.5-entmax vs alpha-entmax transformers on Multi30k en-de
(fairseq_sparse.sparse_transformer.multi30k), after preparing the data with data_prep/multi30k.sh.

    python scripts/multi30k_sparse_attention.py --out outputs/multi30k [--max-epoch 4] [--device cuda] \\
        [--patience 5] [--test-prefix RAW/test_2017_flickr ...]
"""

import argparse
import subprocess
from pathlib import Path

from fairseq_sparse.experiments import at_least
from fairseq_sparse.sparse_transformer import multi30k
from fairseq_sparse.sparse_transformer.multi30k import NORMALIZERS

REPO = Path(__file__).resolve().parents[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=multi30k.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "multi30k",
                        help="data, checkpoints, tensorboard logs, the alpha-entmax attention report and "
                             "results.md (default: outputs/multi30k)")
    parser.add_argument("--data", type=Path, help="binarized data (default: prepare it under OUT/data)")
    parser.add_argument("--max-epoch", type=at_least(1), default=4,
                        help="training epochs per model (default: %(default)s)")
    parser.add_argument("--dim", type=int, default=128, help="embedding width; feed-forward 2x (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=2, help="encoder and decoder layers (default: %(default)s)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads per layer (default: %(default)s)")
    parser.add_argument("--max-tokens", type=at_least(1), default=4096,
                        help="tokens a batch (fairseq's --max-tokens); fewer make more updates an epoch, and so "
                             "more reach for the alphas (default: %(default)s)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="train and translate on CPU or on the (first) CUDA GPU")
    parser.add_argument("--normalizers", nargs="+", choices=NORMALIZERS, default=list(NORMALIZERS),
                        help="attention normalisers to compare, one model each (default: all)")
    parser.add_argument("--jobs", type=at_least(1), default=1,
                        help="models trained at the same time (default: %(default)s)")
    parser.add_argument("--stop-time-hours", type=float, help="also stop each training after this wall time")
    parser.add_argument("--patience", type=at_least(1),
                        help="also stop each training when its validation loss has not improved for this many "
                             "epochs (fairseq's --patience); a model so stopped is not trained again")
    parser.add_argument("--test-prefix", action="append", default=[], metavar="PREFIX",
                        help="also translate and score the raw test set PREFIX.en / PREFIX.de (repeatable), e.g. "
                             "another Multi30k test year")
    parser.add_argument("--seed", type=int, default=1, help="training seed, the same for every model "
                                                            "(default: %(default)s)")
    parser.add_argument("--alpha-lr-scale", type=float, default=1.0,
                        help="the alpha-entmax heads' alpha learning rate as a multiple of the model's "
                             "(entmax_transformer's --alpha-lr-scale; default: %(default)s, the paper's)")
    parser.add_argument("--speed-updates", type=at_least(0), default=0,
                        help="measure training tokens/s apart: each model trains this many updates alone, "
                             "before the runs, once (0: the runs' own mean over epochs; default: %(default)s)")
    parser.add_argument("--speed-rounds", type=at_least(1), default=2,
                        help="rounds of that measurement, the normalisers in a rotated order each "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    prepared = args.out / "data"
    if args.data is None:
        if not (prepared / "bin" / "dict.en.txt").exists():
            subprocess.run(["bash", str(REPO / "data_prep" / "multi30k.sh"), str(prepared)], check=True)
        args.data = prepared / "bin"
    multi30k.run(args)


if __name__ == "__main__":
    main()
