"""The README's test command: pytest arguments pass through, and paths select what runs
instead of being collected beside the whole suite (pytest.ini's testpaths)."""

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


def test_with_no_path_the_whole_suite_is_collected_and_options_pass_through():
    # --deselect's value looks like a path: pytest, not the script, must read it.
    ids, deselected = collect("--deselect", "tests/test_docs.py::test_the_link_pattern_finds_images_and_pages")
    assert deselected == 1
    assert {i.split("::")[0] for i in ids} >= {"tests/test_docs.py", "tests/scripts/test_run_tests.py"}, ids
