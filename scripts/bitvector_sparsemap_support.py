"""Why SparseMAP's support collapses in the bit-vector VAE: the measurement of
fairseq_sparse.latent.sparsemap_support.

    python scripts/bitvector_sparsemap_support.py --out DIR [--images 3200] [--epochs 5] [--bits 32] [--test-images N]
"""

import argparse
from pathlib import Path

from fairseq_sparse.configs import at_least
from fairseq_sparse.latent.images import FULL_MNIST
from fairseq_sparse.latent import sparsemap_support


def main(argv=None):
    parser = argparse.ArgumentParser(description=sparsemap_support.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="directory for support.json and support.png")
    parser.add_argument("--data", type=Path, default=FULL_MNIST,
                        help="the full MNIST's IDX files (default: ../shared/data/images/mnist-full)")
    parser.add_argument("--images", type=int, default=3200, help="training images, the first of the official "
                                                                 "training set (default: %(default)s)")
    parser.add_argument("--epochs", type=at_least(1), default=5, help="epochs per variant (default: %(default)s)")
    parser.add_argument("--bits", type=at_least(1), default=32, help="D, the latent bits (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=2e-3, help="Adam's rate, the paper's (default: %(default)s)")
    parser.add_argument("--batch-size", type=at_least(1), default=64, help="the paper's (default: %(default)s)")
    parser.add_argument("--nll-samples", type=at_least(1), default=32,
                        help="importance samples per test image (default: %(default)s)")
    parser.add_argument("--test-images", type=int, default=1000,
                        help="the first of the 10,000 official test images to score (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every variant (default: %(default)s)")
    args = parser.parse_args(argv)
    sparsemap_support.run(args)


if __name__ == "__main__":
    main()
