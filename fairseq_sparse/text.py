"""Reading text corpora of one sentence per line, with errors that name the file and line."""

import itertools
from pathlib import Path


def read_lines(path, allow_empty=False, hint=""):
    """The lines of a one-sentence-per-line file, without their line ends, each checked to hold text.

    Lines end at ``\n`` (a ``\r`` before it is dropped: Windows line ends); a file with
    ``\r`` and no ``\n`` at all has classic Mac line ends and is split at ``\r``.  A
    ``\r`` inside a line of a ``\n`` file stays (WMT text has them).  An empty or
    whitespace-only line is an error naming the file and line (and ``hint``), since it would pair
    sentences with nothing (``allow_empty``: kept, for a release whose reader drops
    such lines itself); an extra final line end is not a line."""
    path = Path(path)
    number = 0
    try:
        with path.open(encoding="utf-8", newline="\n") as f:
            first = f.readline()
            if "\r" in first and not first.endswith("\n"):  # no "\n" in the whole file
                ends = first.split("\r")
                lines = ends[:-1] if ends[-1] == "" else ends
            else:
                lines = (line.removesuffix("\n").removesuffix("\r") for line in itertools.chain([first], f) if line)
            for number, line in enumerate(lines, 1):
                if not allow_empty and not line.strip():
                    raise ValueError(f"{path}:{number}: empty line" + (f" ({hint})" if hint else ""))
                yield line
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: cannot be read as UTF-8 text after line {number} ({e})") from None
