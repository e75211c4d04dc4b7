"""Markdown tables, the one way every report and results page of the package writes them, and
the one way their cells show a value over seeds."""

import statistics


def table(header, rows):
    """A GitHub Markdown table: ``header`` a sequence of column names, ``rows`` sequences of
    cells already formatted (anything else is passed to ``str``).  A row of the wrong width
    is an error rather than a table that renders shifted."""
    header = [str(h) for h in header]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        cells = [str(c) for c in row]
        if len(cells) != len(header):
            raise ValueError(f"Markdown table row {cells} has {len(cells)} cells, the header {len(header)}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mean_spread(values, digits, missing="-"):
    """"mean ± standard deviation" of ``values`` at ``digits`` decimals; one value alone, since one
    run has no spread to show; ``missing`` where there is none."""
    if not values:
        return missing
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"
