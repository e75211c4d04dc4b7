"""The estimator x experiment grid of Correia et al. (NeurIPS 2020) through fairseq-train, tabulated
next to the paper's numbers (fairseq_sparse.latent.results).

    python scripts/latent_results.py --out results/latent              # digits, 3 seeds
    python scripts/latent_results.py --out results/mnist --dataset mnist      # the full MNIST, official split
    python scripts/latent_results.py --out results/ssvae --dataset mnist --experiments ssvae \\
        --warm-start-epochs 100 --epochs '{"ssvae": 200}' --fairseq-args "--lr 5e-4 --latent-dim 8"  # the paper's protocol
"""

import argparse
import json
from pathlib import Path

from fairseq_sparse.configs import at_least
from fairseq_sparse.latent.images import FULL_MNIST
from fairseq_sparse.latent import results


def main(argv=None):
    parser = argparse.ArgumentParser(description=results.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="directory for logs, results.json, tables, plot")
    parser.add_argument("--experiments", nargs="+", default=list(results.EXPERIMENTS), choices=list(results.EXPERIMENTS),
                        help="experiments to run (default: all)")
    parser.add_argument("--estimators", nargs="+", help="only these (default: every one the experiment supports)")
    parser.add_argument("--seeds", type=at_least(1), default=3,
                        help="runs per experiment and estimator: N seeds, from --first-seed on (default: %(default)s)")
    parser.add_argument("--first-seed", type=at_least(0), default=1,
                        help="the first of the --seeds seeds, to add seeds to a grid run before "
                             "(default: %(default)s)")
    parser.add_argument("--dataset", choices=["digits", "mnist"], default="digits",
                        help="images: scikit-learn's 8x8 digits (no download) or MNIST from --data "
                             "(default: %(default)s)")
    parser.add_argument("--data", type=Path, default=FULL_MNIST,
                        help="MNIST-format directory for --dataset mnist (default: the full MNIST, IDX files)")
    parser.add_argument("--epochs", type=json.loads, default={},
                        help='epochs of every experiment (a number), or per experiment as JSON, e.g. '
                             '\'{"ssvae": 200}\' (default: 10 each)')
    parser.add_argument("--batch-size", type=at_least(1), default=64, help="images per update (default: %(default)s)")
    parser.add_argument("--nll-samples", type=at_least(1), default=32,
                        help="importance samples per image of the bit-vector VAE's NLL estimate (default: %(default)s)")
    parser.add_argument("--fairseq-args", default="",
                        help="more fairseq-train options for every run, overriding the defaults above "
                             "(e.g. \"--lr 5e-4 --latent-dim 10\")")
    parser.add_argument("--warm-start-epochs", type=at_least(0), default=0,
                        help="ssvae only: first train this many epochs on the labelled images alone "
                             "(--labelled-only), then the whole objective from that checkpoint, as the paper's "
                             "code does (100 there; default: %(default)s, no warm start)")
    parser.add_argument("--warm-start-lr", type=float, default=1e-3,
                        help="Adam's learning rate in the warm start (default: the paper's %(default)s)")
    parser.add_argument("--jobs", type=at_least(1), default=1,
                        help="runs at the same time, each on its share of the cores unless OMP_NUM_THREADS is set "
                             "(default: %(default)s)")
    parser.add_argument("--gpu", dest="cpu", action="store_false", help="train on the GPU (default: --cpu)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each run's last checkpoint, as OUT/checkpoints/RUN/checkpoint_last.pt where "
                             "OUT/logs/RUN.log is its log (e.g. for scripts/bitvector_code_use.py; fairseq also "
                             "keeps checkpoint_best.pt, best on the first --valid-subset); a run trained again goes on "
                             "from it; default: save none")
    parser.add_argument("--tensorboard", action="store_true", help="also write tensorboard logs under OUT")
    parser.add_argument("--collect-only", action="store_true", help="tabulate the logs already in OUT; train nothing")
    args = parser.parse_args(argv)
    families = ("ssvae", "signaling_game", "bitvector_vae")
    if isinstance(args.epochs, int) and not isinstance(args.epochs, bool):
        args.epochs = dict.fromkeys(families, args.epochs)
    if not isinstance(args.epochs, dict):
        parser.error(f"--epochs {json.dumps(args.epochs)}: give a number, or a JSON object such as '{{\"ssvae\": 3}}'")
    for family in families:
        args.epochs.setdefault(family, 10)
    for family, epochs in args.epochs.items():
        # fairseq-train reads --max-epoch 0 as no limit: a run that never ends.
        if family not in families or not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
            parser.error(f"--epochs: {family!r}: {epochs!r}; give each of {', '.join(families)} a whole "
                         "number of epochs, at least 1")
    if args.warm_start_epochs and "ssvae" not in args.experiments:
        parser.error("--warm-start-epochs applies to the ssvae experiment only")
    results.run(args)


if __name__ == "__main__":
    main()
