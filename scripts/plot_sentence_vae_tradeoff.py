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

COLUMNS = ("run", "epoch", "average_hoyer", "accuracy")


def read_table(path):
    """{run: [(epoch, average Hoyer, accuracy), ...] in epoch order}; a bad line is a
    ValueError naming the file and line."""
    runs = {}
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    header_seen = False
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        where = f"{path}, line {number}"
        if not header_seen:
            if tuple(fields) != COLUMNS:
                raise ValueError(f"{where}: the header must be {'<TAB>'.join(COLUMNS)!r}, not {line!r}")
            header_seen = True
            continue
        if len(fields) != len(COLUMNS):
            raise ValueError(f"{where}: {len(fields)} tab-separated fields, expected {len(COLUMNS)}: {line!r}")
        run, epoch, hoyer, accuracy = fields
        try:
            epoch, hoyer, accuracy = int(epoch), float(hoyer), float(accuracy)
        except ValueError:
            raise ValueError(f"{where}: epoch must be an integer, average_hoyer and accuracy numbers: "
                             f"{line!r}") from None
        if epoch < 1 or not 0 <= hoyer <= 1 or not 0 <= accuracy <= 100:  # NaN fails these too
            raise ValueError(f"{where}: epoch at least 1, average Hoyer in [0, 1], accuracy in [0, 100] "
                             f"(percent): {line!r}")
        if any(e == epoch for e, _, _ in runs.get(run, [])):
            raise ValueError(f"{where}: run {run!r} has epoch {epoch} twice")
        runs.setdefault(run, []).append((epoch, hoyer, accuracy))
    if not runs:  # also when no header was seen: figures only follow one
        raise ValueError(f"{path}: no header and figures")
    return {run: sorted(points) for run, points in runs.items()}


def styles(count):
    """A distinct (colour, line style, marker) for each of ``count`` runs: matplotlib's 10 default
    colours while they suffice, else tab20's 20 (light and dark of 10 hues); past the 20th the colours
    come round again, dashed and with square markers (a legend's short lines hide the dashes)."""
    from matplotlib import colormaps

    palette = colormaps["tab10" if count <= 10 else "tab20"].colors
    first_round, second_round = ("-", "o"), ("--", "s")
    return [(palette[k % len(palette)], *(first_round if k < len(palette) else second_round)) for k in range(count)]


def plot(runs, path, chance=None, title=None):
    """Writes the figure; returns {run: (x, y)} as drawn, read back from the figure's lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    for (run, points), (colour, style, marker) in zip(runs.items(), styles(len(runs))):
        epochs, hoyer, accuracy = zip(*points)
        ax.plot(hoyer, accuracy, marker=marker, markersize=4, label=run, color=colour, linestyle=style)
        for i in range(len(points)):
            ax.annotate(str(epochs[i]), (hoyer[i], accuracy[i]), textcoords="offset points", xytext=(4, 4),
                        fontsize=6, color=colour)
    if chance is not None:
        ax.axhline(chance, color="grey", linestyle=":", linewidth=1, label=f"chance ({chance:g}%)")
    ax.set_xlabel("average Hoyer (validation; higher is sparser)")
    ax.set_ylabel("frozen-encoder accuracy, test (%)")
    ax.set_title(title or "accuracy against sparsity, epoch by epoch (numbers: epochs)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the axes: never over a point
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()
             if line.get_label() in runs}
    plt.close(fig)
    return drawn


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
