"""Assemble the English-German APE training data of Correia & Martins (2019) from
unpacked WMT APE, AMU and eSCAPE releases.

    python data_prep/prepare_ape.py OUT --real DIR [DIR ...] [--artificial DIR ...] [--oversample 20]

Triplets are found by name inside each release directory: files whose names differ
only in the field, ``src`` (or a trailing ``en``), ``mt`` or ``pe``, wherever it
stands (``train.pe``, WMT17's ``en-de.pe.test.2017``).  In a ``--real`` release
(WMT16/17/18 APE) a name containing ``train`` is training data, ``dev`` the
validation set and ``test`` a test set, named by the year in its path
(``test2016`` ...).  Every triplet of an ``--artificial`` release (AMU's 4M and
500K, eSCAPE) is training data.

OUT gets ``train.{src,mt,pe}`` (the artificial triplets, then the real training
triplets repeated ``--oversample`` times: 23K x 20 + 4M + 500K in the paper),
``valid.*`` (WMT16 dev), ``test{YEAR}.*`` per test set and ``test.*`` (the
earliest, WMT16's), for ``--task ape`` or ``fairseq-sparse-ape-binarize``.  Files
are streamed, never held whole.  Triplet files whose line counts differ are an
error naming the file and line; triplets with an empty field are dropped and
counted; real training triplets that appear in more than one release (WMT17
republishes WMT16's) are kept once.
"""

import argparse
import re
import sys
from pathlib import Path

from fairseq_sparse.ape.binarize import aligned_chunks
from fairseq_sparse.ape.triplets import FIELDS


def field_of(name):
    """(field, pattern) for a triplet file name, e.g. ``train.pe`` -> ("pe", "train.{}") and
    ``en-de.src.test.2017`` -> ("src", "en-de.{}.test.2017") (WMT17's test names); None
    for other files.  A trailing ``.en`` stands for the source where no ``.src`` exists."""
    parts = name.split(".")
    hits = [i for i, part in enumerate(parts) if part in FIELDS]
    if len(hits) == 1:
        i = hits[0]
        return parts[i], ".".join(parts[:i] + ["{}"] + parts[i + 1:])
    if not hits and len(parts) > 1 and parts[-1] == "en":
        return "en", ".".join(parts[:-1] + ["{}"])
    return None


def triplets_in(release):
    """[{field: path}] of the triplets under one release directory.

    Files are matched by name pattern within a directory; a field missing there is taken
    from the one file of that pattern elsewhere in the release (WMT16's references come in
    their own archive, test_pe.zip).  Groups without a ``pe`` file (blind test sets) are
    not triplets."""
    groups = {}
    for path in sorted(p for p in release.rglob("*") if p.is_file()):
        # Archives made on macOS carry __MACOSX/._NAME resource forks: not text.
        if path.name.startswith(".") or "__MACOSX" in path.parts:
            continue
        hit = field_of(path.name)
        if hit is None:
            continue
        field, pattern = hit
        group = groups.setdefault((path.parent, pattern), {})
        if field == "en":
            group.setdefault("src", path)
        else:
            group[field] = path
    found = []
    for (_, pattern), group in groups.items():
        if "pe" not in group:
            continue
        triplet = dict(group)  # groups stay as found on disk while others look into them
        for field in FIELDS:
            if field not in group:
                elsewhere = [other[field] for (_, name), other in groups.items() if name == pattern and field in other]
                if len(elsewhere) != 1:
                    where = "nowhere in the release" if not elsewhere else f"{len(elsewhere)} times elsewhere"
                    raise SystemExit(f"{group['pe']}: its {pattern.format(field)} is not beside it and {where}")
                triplet[field] = elsewhere[0]
        found.append({field: triplet[field] for field in FIELDS})
    if not found:
        raise SystemExit(f"{release}: no triplet files (NAME.src/.mt/.pe) found")
    return found


def read_aligned(paths):
    """Yield (src, mt, pe) lines, streamed; misalignment stops with the file and line.  Empty
    lines are kept: the Writer drops their triplets and counts them."""
    for chunk in aligned_chunks(paths, 10000, allow_empty=True):
        yield from zip(*(chunk[field] for field in FIELDS))


class Writer:
    def __init__(self, out, split):
        self.files = [open(out / f"{split}.{f}", "w", encoding="utf-8") for f in FIELDS]
        self.count = self.dropped = 0

    def add(self, triplet):
        if not all(field.strip() for field in triplet):
            self.dropped += 1
            return
        for f, line in zip(self.files, triplet):
            f.write(line + "\n")
        self.count += 1

    def close(self):
        for f in self.files:
            f.close()


def year_of(path):
    match = re.search(r"(20\d\d)", str(path))
    return match.group(1) if match else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="where {train,valid,test*}.{src,mt,pe} are written")
    parser.add_argument("--real", type=Path, nargs="+", required=True, help="unpacked WMT APE releases")
    parser.add_argument("--artificial", type=Path, nargs="*", default=[], help="unpacked AMU / eSCAPE releases")
    parser.add_argument("--oversample", type=int, default=20,
                        help="times the real training triplets are repeated (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.oversample < 1:
        raise SystemExit("--oversample must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)

    real_train, seen, duplicates, empty = [], set(), 0, 0
    valid, tests = None, {}
    for release in args.real:
        for paths in triplets_in(release):
            name = paths["pe"].name.lower()
            if "train" in name:
                for triplet in read_aligned(paths):
                    if not all(field.strip() for field in triplet):
                        empty += 1
                    elif triplet in seen:
                        duplicates += 1
                    else:
                        seen.add(triplet)
                        real_train.append(triplet)
            elif "dev" in name:
                if valid is not None:
                    raise SystemExit(f"{paths['pe']}: a second dev set (the first: {valid['pe']})")
                valid = paths
            elif "test" in name:
                year = year_of(paths["pe"].relative_to(release.parent)) or str(len(tests))
                if year in tests:
                    raise SystemExit(f"{paths['pe']}: a second test set for {year} (the first: {tests[year]['pe']})")
                tests[year] = paths
            else:
                raise SystemExit(f"{paths['pe']}: neither train, dev nor test by its name")
    if not real_train:
        raise SystemExit(f"no real training triplets (a *train*.pe) in {' '.join(map(str, args.real))}")

    train = Writer(args.out, "train")
    for release in args.artificial:
        for paths in triplets_in(release):
            for triplet in read_aligned(paths):
                train.add(triplet)
    artificial = train.count
    for _ in range(args.oversample):
        for triplet in real_train:
            train.add(triplet)
    train.close()
    report = [f"train: {train.count} triplets = {artificial} artificial + {len(real_train)} real x "
              f"{args.oversample}; {train.dropped + empty} with an empty field dropped; "
              f"{duplicates} real duplicates kept once"]
    splits = {"valid": valid} if valid is not None else {}
    for year in sorted(tests):
        splits[f"test{year}"] = tests[year]
    if tests:
        splits["test"] = tests[sorted(tests)[0]]
    for split, paths in splits.items():
        writer = Writer(args.out, split)
        for triplet in read_aligned(paths):
            writer.add(triplet)
        writer.close()
        report.append(f"{split}: {writer.count} triplets from {paths['pe'].parent}"
                      f"{f' ({writer.dropped} with an empty field dropped)' if writer.dropped else ''}")
    print("\n".join(f"[prepare_ape] {line}" for line in report), file=sys.stderr)


if __name__ == "__main__":
    main()
