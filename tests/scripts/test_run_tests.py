"""The README's test command: pytest arguments pass through, and paths under tests/ select
what runs instead of being collected beside the whole suite."""

import re
import subprocess

from tests.conftest import REPO


def collect(*args):
    """The test ids `scripts/run_tests.sh ARGS` would run (serially, collection only) and how
    many it collected but deselected."""
    proc = subprocess.run(["bash", "scripts/run_tests.sh", *args, "--collect-only", "-q", "-n", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    deselected = re.search(r"\((\d+) deselected\)", proc.stdout)
    return [line for line in proc.stdout.splitlines() if "::" in line], int(deselected[1]) if deselected else 0


def test_a_path_under_tests_runs_that_file_alone():
    ids, deselected = collect("tests/test_docs.py")
    assert ids and all(i.startswith("tests/test_docs.py::") for i in ids) and deselected == 0, ids


def test_an_option_value_that_names_a_folder_still_selects_from_the_whole_suite():
    # `docs` is a folder at the top of the repository: as -k's value it must not become a path.
    ids, deselected = collect("-k", "docs")
    assert any(i.startswith("tests/test_docs.py::") for i in ids), ids
    # The other files' tests were collected, then deselected by -k.
    assert deselected > 100, deselected
