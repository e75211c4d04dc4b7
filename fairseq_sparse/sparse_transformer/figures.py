"""The attention report's figures: matplotlib, one function per figure, each writing one PNG.

Every function takes plain values keyed by ``(site, layer)`` and the model's site order
(``attention_sites``), so that it draws any model built on ``entmax_transformer``.
"""

import math
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .stats import pool_by_site  # noqa: E402

# Attention maps: at most this many heads a row, in a grid as near square as the heads allow.
MAP_COLUMNS = 4
# Point size of the token labels of an attention map, and the inches each position takes.
MAP_LABEL_SIZE, MAP_CELL = 7, 0.16
# Narrowest figure, in inches: a title wider than its panel would be cut at both edges.
MIN_WIDTH = 6.0
# Largest page of attention maps, in inches a side (1,920 pixels at the figures' 120 dpi): a
# larger figure is shrunk to fit a screen, and its token labels can no longer be read; a
# sentence's heads that do not fit one page go to more pages.
MAP_PAGE = 16.0


def _save(fig, path):
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fig


def signed_format(values):
    """A format for signed changes that gives the typical one of ``values`` (the median of the
    nonzero ones) two significant digits: three decimals, up to six where the changes are
    smaller (three would print +0.000 in most cells after a short run)."""
    nonzero = sorted(abs(v) for v in values if v)
    if not nonzero:
        return "{:+.3f}"
    typical = nonzero[len(nonzero) // 2]
    return f"{{:+.{min(6, max(3, 1 - math.floor(math.log10(typical))))}f}}"


def _rows(values, sites):
    return sorted(values, key=lambda sl: (sites.index(sl[0]), sl[1]))


def label_color(rgba):
    """Black or white, whichever reads better on a cell of colour ``rgba``: black on cells
    lighter than mid-grey (ITU-R BT.601 luma), white on darker ones."""
    r, g, b = rgba[:3]
    return "k" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "w"


def heatmap(values, title, path, sites, vmin=None, vmax=None, cmap="viridis", fmt="{:.2f}", label=None):
    """One row per (site, layer), one column per head, each cell labelled with its value in
    whichever of black or white reads on its colour; ``label`` names the colour bar."""
    rows = _rows(values, sites)
    matrix = [values[r] for r in rows]
    fig, ax = plt.subplots(figsize=(max(MIN_WIDTH, 1.6 + 0.6 * len(matrix[0])), 1.2 + 0.45 * len(rows)),
                           layout="constrained")
    im = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_yticks(range(len(rows)), [f"{s} {layer}" for s, layer in rows])
    ax.set_xticks(range(len(matrix[0])), [f"h{h}" for h in range(len(matrix[0]))])
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=7,
                    color=label_color(im.cmap(im.norm(v))))
    fig.colorbar(im, ax=ax, label=label)
    ax.set_title(textwrap.fill(title, 60), fontsize=10)
    return _save(fig, path)


def alpha_histogram(alphas, path, sites):
    """The learned alphas of each site over (1, 2), one panel per site.

    Panels rather than overlaid bars, so that each site's shape (one mode or two) reads on its
    own; heads are counted, so the y ticks are whole numbers.
    """
    pooled = pool_by_site(alphas, sites)
    fig, axes = plt.subplots(len(pooled), 1, figsize=(MIN_WIDTH, 0.6 + 1.6 * len(pooled)), sharex=True,
                             squeeze=False, layout="constrained")
    for ax, (site, vals) in zip(axes[:, 0], pooled.items()):
        ax.hist(vals, bins=20, range=(1, 2), color="C0", edgecolor="white")
        ax.set_ylabel("heads")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(site, fontsize=9)
    axes[-1, 0].set_xlabel("alpha")
    fig.suptitle("learned alpha by attention site", fontsize=10)
    _save(fig, path)


def diversity(values, heads, path, sites, max_diversity):
    """Jensen-Shannon divergence between the heads of each layer, one line per site."""
    fig, ax = plt.subplots(figsize=(MIN_WIDTH, 3.5), layout="constrained")
    for site in sites:
        layers = sorted(layer for s, layer in values if s == site)
        if layers:
            ax.plot(layers, [values[(site, layer)] for layer in layers], marker="o", label=site)
    ax.axhline(max_diversity, ls="--", c="gray", label=f"log {heads} (disjoint heads)")
    ax.set_xlabel("layer")
    ax.set_xticks(sorted({layer for _, layer in values}))
    ax.set_ylabel("Jensen-Shannon divergence")
    ax.set_title("head diversity per layer", fontsize=10)
    ax.legend()
    _save(fig, path)


def trajectories(series, path, sites):
    """``series``: {(site, layer): [(updates, alpha per head)]}; one panel per attention
    module, a row per site and a column per layer."""
    rows = _rows(series, sites)
    present = [site for site in sites if any(s == site for s, _ in rows)]
    layers = max(layer for _, layer in rows) + 1
    fig, axes = plt.subplots(len(present), layers, figsize=(max(2.6 * layers, MIN_WIDTH), 2.4 * len(present) + 0.6),
                             sharex=True, sharey=True, squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.set_visible(False)
    for site, layer in rows:
        ax = axes[present.index(site), layer]
        ax.set_visible(True)
        pts = series[(site, layer)]
        for h in range(len(pts[0][1])):
            ax.plot([u for u, _ in pts], [a[h] for _, a in pts], marker=".", lw=1, label=f"h{h}")
        ax.set_title(f"{site} {layer}", fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("updates")
    for ax in axes[:, 0]:
        ax.set_ylabel("alpha")
    axes[0, 0].set_ylim(1.0, 2.0)
    axes[0, 0].legend(fontsize=6)
    fig.suptitle("alpha trajectories per head (update 0: initialisation)", fontsize=10)
    _save(fig, path)


def _map_panel(n_queries, n_keys):
    """(width, height) in inches of one head's map: it grows with the sentence so that every
    position keeps a readable label."""
    return max(3.2, MAP_CELL * n_keys + 1.0), max(3.4, MAP_CELL * n_queries + 1.8)


def _map_columns(heads, width):
    """Heads a row: as near square as the heads allow, at most MAP_COLUMNS, and within a page."""
    return max(1, min(MAP_COLUMNS, math.ceil(math.sqrt(heads)), int((MAP_PAGE - 1.0) // width)))


def map_pages(stem, heads, n_queries, n_keys):
    """[(file name, range of heads)]: the pages of one sentence's maps, each at most
    ``MAP_PAGE`` inches a side (one head a page where a single map is larger); ``stem.png``
    where one page holds every head, ``stem_heads<first>-<last>.png`` otherwise."""
    width, height = _map_panel(n_queries, n_keys)
    columns = _map_columns(heads, width)
    rows = max(1, min(math.ceil(heads / columns), int(MAP_PAGE // height)))
    per_page = columns * rows
    if per_page >= heads:
        return [(f"{stem}.png", range(heads))]
    return [(f"{stem}_heads{first}-{min(first + per_page, heads) - 1}.png", range(first, min(first + per_page, heads)))
            for first in range(0, heads, per_page)]


def attention_maps(p, queries, keys, head_alphas, title, query_label, out, stem):
    """The attention of every head over one sentence, on the pages of :func:`map_pages` in
    ``out``; ``p`` an array (H, len(queries), len(keys)).  Returns the file names."""
    pages = map_pages(stem, p.shape[0], len(queries), len(keys))
    for name, heads in pages:
        suffix = "" if len(pages) == 1 else f", heads {heads[0]} to {heads[-1]}"
        attention_map(p, queries, keys, head_alphas, title + suffix, query_label, out / name, heads)
    return [name for name, _ in pages]


def attention_map(p, queries, keys, head_alphas, title, query_label, path, heads=None):
    """The attention of the heads ``heads`` (default: every head) over one sentence in a grid
    of at most ``MAP_COLUMNS`` heads a row, as near square as the heads allow (4 heads:
    2 x 2) within a page's width, with one colour bar; ``p`` an array (H, len(queries), len(keys)); every row and
    column labelled."""
    heads = list(range(p.shape[0]) if heads is None else heads)
    width, height = _map_panel(len(queries), len(keys))
    columns = _map_columns(len(heads), width)
    grid_rows = math.ceil(len(heads) / columns)
    fig, axes = plt.subplots(grid_rows, columns, figsize=(max(MIN_WIDTH, width * columns + 1.0), height * grid_rows),
                             squeeze=False, layout="constrained")
    for ax in axes.flat[len(heads):]:
        ax.set_visible(False)
    for j, head in enumerate(heads):
        ax = axes.flat[j]
        im = ax.imshow(p[head], cmap="Greys", vmin=0, vmax=1, aspect="auto")
        ax.set_title(f"head {head}, alpha {head_alphas[head]:.2f}", fontsize=8)
        ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=MAP_LABEL_SIZE)
        ax.set_yticks(range(len(queries)), queries, fontsize=MAP_LABEL_SIZE)
        ax.set_xlabel("key (token at the position)", fontsize=8)
        if j % columns == 0:
            ax.set_ylabel(query_label, fontsize=8)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label="attention weight")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)
