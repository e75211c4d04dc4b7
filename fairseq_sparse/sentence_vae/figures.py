"""The sentence-VAE line's figures: the analysis's heat maps and spike bars, and the
sparsity-against-accuracy trade-off across runs."""

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402

from ..text import read_lines  # noqa: E402


def spike_bars(pattern, path):
    """Per dimension, the entropy of its spike (bits) and, over it, the part the sentence
    decides: where the first bar stands alone, the dimension's zeros are a coin the same
    for every sentence."""
    entropy = pattern["per_dimension"]["entropy_bits"]
    information = pattern["per_dimension"]["information_bits"]
    fig, ax = plt.subplots(figsize=(max(5.5, 0.25 * len(entropy) + 2), 3.2))
    ax.bar(range(len(entropy)), entropy, color="0.75", label="entropy of the spike")
    ax.bar(range(len(information)), information, color="tab:red", label="of it, decided by the sentence")
    ax.set_title(f"spike pattern: {pattern['information_bits']:.2f} of {pattern['entropy_bits']:.2f} bits "
                 "decided by the sentence", fontsize=9)
    ax.set_xlabel("latent dimension")
    ax.set_ylabel("bits")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    save(fig, path)


def heat_map(matrix, path, title, xlabel, ylabel, colorbar, limits=None):
    """``limits``: the colour scale's (low, high), for a quantity with a range of its own (a
    fraction: (0, 1)); by default the matrix's, which stretches a constant to a false contrast."""
    fig, ax = plt.subplots(figsize=(max(5.5, 0.25 * matrix.shape[1] + 2), max(3, 0.4 * matrix.shape[0] + 1.5)))
    low, high = limits if limits is not None else (None, None)
    image = ax.imshow(matrix, aspect="auto", cmap="viridis", vmin=low, vmax=high)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_yticks(range(matrix.shape[0]))
    fig.colorbar(image, ax=ax, label=colorbar)
    save(fig, path)
    return fig


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# The trade-off table: a header line, then one line per run and epoch.
COLUMNS = ("run", "epoch", "average_hoyer", "accuracy")


def read_table(path):
    """{run: [(epoch, average Hoyer, accuracy), ...] in epoch order}; a bad line is a
    ValueError naming the file and line."""
    runs = {}
    lines = read_lines(path, allow_empty=True)
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
    drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()
             if line.get_label() in runs}
    save(fig, path)
    return drawn
