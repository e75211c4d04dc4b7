"""Reading text of one sentence per line: the one rule every reader of the package follows
(APE triplets, sentence-VAE corpora and labels, translation test sets and references,
scored hypotheses, the classifier's labelled sentences), with errors that name the file
and line.

The rule:

- a line ends at ``\\n``; a ``\\r`` just before it is dropped (Windows line ends); a file
  with ``\\r`` and no ``\\n`` anywhere has classic Mac line ends and is split at ``\\r``;
- nothing else ends a line: a ``\\r`` inside a line of a ``\\n`` file, U+2028, U+2029, U+0085,
  form and vertical tabs and the other separators that :meth:`str.splitlines` would split
  at stay inside their line (WMT and Common Crawl text has them), so the lines of two
  parallel files never shift against each other;
- an extra final line end is not a line;
- an empty or whitespace-only line is an error naming the file and line, since it would
  pair a sentence with nothing (``allow_empty`` keeps them, for a reader that drops or
  reports such lines itself);
- a file with no line at all is an error (``allow_empty`` allows it too);
- text that is not UTF-8 is an error naming the line and the byte within it.
"""

import itertools
from pathlib import Path


def read_lines(path, allow_empty=False, hint=""):
    """Yield the lines of a one-sentence-per-line file, without their line ends, one at a time
    (a corpus need not fit in memory); see the module's docstring for the rule.  ``hint`` is
    added to the empty-line error (what to do about it)."""
    path = Path(path)
    number = 0
    with path.open("rb") as f:
        first = f.readline()
        if b"\r" in first and not first.endswith(b"\n"):  # no "\n" in the whole file
            lines = first.split(b"\r")
            if lines[-1] == b"":
                lines.pop()
        else:
            lines = (line.removesuffix(b"\n").removesuffix(b"\r") for line in itertools.chain([first], f) if line)
        for number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: not UTF-8 ({e.reason} at byte {e.start} of the line)") from None
            if not allow_empty and not line.strip():
                raise ValueError(f"{path}:{number}: empty line" + (f" ({hint})" if hint else ""))
            yield line
    if number == 0 and not allow_empty:
        raise ValueError(f"{path}: empty file")
