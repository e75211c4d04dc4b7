"""The sentence-VAE stability grid of Prokhorov et al. (2021, Sec. 6) through fairseq-train
(fairseq_sparse.sentence_vae.stability).

    python scripts/sentence_vae_stability.py DATA_DIR --out DIR [--seeds 3] [--epochs 10] [--analyse]
"""

import argparse
from pathlib import Path

from fairseq_sparse.compat.checkpoints import RENAMED_CRITERIA
from fairseq_sparse.configs import at_least
from fairseq_sparse.sentence_vae import stability
from fairseq_sparse.sentence_vae.stability import KNOBS


def settings(text):
    """"10,1 1,1" -> [(10.0, 1.0), (1.0, 1.0)]"""
    try:
        return [tuple(float(v) for v in pair.split(",")) for pair in text.split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: settings are space-separated pairs like '10,1 1,1'") from None


def pair(text):
    values = settings(text)
    if len(values) != 1 or len(values[0]) != 2:
        raise argparse.ArgumentTypeError(f"{text!r}: one pair like '0.01,0.01'")
    return values[0]


def probability(high_included):
    """An argparse type: a float in [0, 1) or, with ``high_included``, in [0, 1]."""
    interval = "[0, 1]" if high_included else "[0, 1)"

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not (0 <= value <= 1 if high_included else 0 <= value < 1):
            raise argparse.ArgumentTypeError(f"{text!r}: a probability in {interval}")
        return value
    return parse


def baselines(text):
    """"elbo,1 elbo_l1,0.01,0.1" -> [("elbo", (1.0,)), ("elbo_l1", (0.01, 0.1))]"""
    runs = []
    for item in text.split():
        objective, *values = item.split(",")
        if objective in RENAMED_CRITERIA:
            raise argparse.ArgumentTypeError(f"{item!r}: {objective} is now {RENAMED_CRITERIA[objective]}")
        if objective not in ("elbo", "elbo_l1", "elbo_l2") or not 1 <= len(values) <= len(KNOBS[objective]):
            raise argparse.ArgumentTypeError(
                f"{item!r}: a baseline is elbo,PSI or elbo_l1,PSI[,PENALTY] or elbo_l2,PSI[,PENALTY]")
        try:
            runs.append((objective, tuple(float(v) for v in values)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: PSI and PENALTY are numbers") from None
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(description=stability.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="sentence_vae DATA_DIR (train/valid/test.txt or binarized)")
    parser.add_argument("--out", type=Path, required=True, help="directory for the runs, tables and plots")
    parser.add_argument("--seeds", type=at_least(1), default=3,
                        help="runs per setting: N seeds, from --first-seed on (default: %(default)s)")
    parser.add_argument("--first-seed", type=at_least(0), default=1,
                        help="the first of the --seeds seeds, to add seeds to a grid run before "
                             "(default: %(default)s)")
    parser.add_argument("--epochs", type=at_least(1), default=10, help="training epochs per run (default: %(default)s)")
    parser.add_argument("--hsvae-settings", type=settings, default=settings("10,1 5,5 1,10"),
                        help="HSVAE (alpha, beta) pairs; '' for none (default: '10,1 5,5 1,10')")
    parser.add_argument("--hsvae-weights", type=pair, default=(0.01, 0.01),
                        help="HSVAE's KL weights psi,lambda (default: the authors' 0.01,0.01)")
    parser.add_argument("--hsvae-options", default="",
                        help="more fairseq-train options for the HSVAE runs, e.g. "
                             "--hsvae-options='--spike-std 0.05 --hard-slab' (the authors' sampler)")
    parser.add_argument("--mat-vae-settings", type=settings, default=settings("1,1 1,10 0.1,10"),
                        help="MAT-VAE (psi, lambda) pairs; '' for none (default: '1,1 1,10 0.1,10')")
    parser.add_argument("--baselines", type=baselines, default=[],
                        help="e.g. 'elbo,0.01 elbo,1 elbo_l1,0.01 elbo_l2,0.01' (default: none)")
    parser.add_argument("--latent-dim", type=at_least(1), default=32,
                        help="latent code dimensions (default: %(default)s)")
    parser.add_argument("--embed-dim", type=at_least(1), default=256,
                        help="word embedding width (default: %(default)s)")
    parser.add_argument("--hidden-dim", type=at_least(1), default=512,
                        help="GRU encoder and decoder width (default: %(default)s)")
    parser.add_argument("--dropout", type=probability(high_included=False), default=0.0,
                        help="dropout on the word embeddings and decoder states of every run, against overfitting a "
                             "small training set; the authors' code has none (default: %(default)s)")
    parser.add_argument("--word-dropout", type=probability(high_included=True), default=0.0,
                        help="every run's decoder reads each input word as <unk> with this probability in training "
                             "(Bowman et al. 2016), so that it leans on the code; the authors' code has none "
                             "(default: %(default)s)")
    parser.add_argument("--lr", type=float, default=8e-4, help="Adam's learning rate (default: %(default)s)")
    parser.add_argument("--batch-size", type=at_least(1), default=256,
                        help="sentences per update (default: %(default)s)")
    parser.add_argument("--analyse", action="store_true",
                        help="also classify the test split from each run's frozen encoder (fairseq-sparse-sentence-vae-analysis)")
    parser.add_argument("--jobs", type=at_least(1), default=1,
                        help="runs at the same time, each on its share of the cores unless OMP_NUM_THREADS is set "
                             "(default: %(default)s)")
    parser.add_argument("--gpu", dest="cpu", action="store_false",
                        help="train on the (first) CUDA GPU, --jobs runs sharing it; the analysis stays on the "
                             "CPU (default: train on the CPU)")
    args = parser.parse_args(argv)
    if not (args.hsvae_settings or args.mat_vae_settings or args.baselines):
        parser.error("nothing to run: give HSVAE or MAT-VAE settings or baselines")
    stability.run(args)


if __name__ == "__main__":
    main()
