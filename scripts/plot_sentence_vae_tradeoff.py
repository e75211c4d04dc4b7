"""Sparse against informative: each sentence-VAE run's frozen-encoder accuracy against
its average Hoyer, epoch by epoch.  Prokhorov et al. (2021) claim HSVAE codes that are
both sparser than the vanilla VAE's and as informative; a run that moved the trade-off
would sit above and right of the others, not on their curve.

    python scripts/plot_sentence_vae_tradeoff.py TABLE.tsv --out FIGURE.png [--chance 10] [--title T]

TABLE.tsv holds measured figures (``sentence_vae_stability.py --analyse`` prints them for
the epoch it trained to; run it one epoch at a time for a curve): a header line
``run<TAB>epoch<TAB>average_hoyer<TAB>accuracy``, then one line per run and epoch, in any
order; lines starting with ``#`` are comments (say there where the figures come from).
Each run is one curve through its epochs in order, each point labelled with its epoch.
"""

import argparse
import sys
from pathlib import Path

from fairseq_sparse.sentence_vae.figures import plot, read_table


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", type=Path, help="TSV: run, epoch, average_hoyer, accuracy (see above)")
    parser.add_argument("--out", type=Path, required=True, help="the figure to write (PNG)")
    parser.add_argument("--chance", type=float, help="draw chance accuracy (percent) as a line")
    parser.add_argument("--title", help="the figure's title")
    args = parser.parse_args(argv)
    try:
        runs = read_table(args.table)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    plot(runs, args.out, args.chance, args.title)
    print(f"{len(runs)} runs, {sum(map(len, runs.values()))} points -> {args.out}")


if __name__ == "__main__":
    sys.exit(main())
