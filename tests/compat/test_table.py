"""The table of fairseq fixes: every fix listed once, applied only where it is needed,
all of them off with FAIRSEQ_SPARSE_NO_COMPAT=1."""

import importlib
import os
import subprocess
import sys

import pytest

import fairseq_sparse
from fairseq_sparse import compat
from tests.conftest import REPO

fairseq_sparse.load_plugin()  # fairseq imported first: a fix module imports it


def test_every_fix_module_is_in_the_table_once():
    modules = sorted(p.stem for p in (REPO / "fairseq_sparse" / "compat").glob("*.py") if p.stem != "__init__")
    assert sorted(p.module for p in compat.PATCHES) == modules
    for patch in compat.PATCHES:
        assert callable(importlib.import_module(f"fairseq_sparse.compat.{patch.module}").apply)
        assert patch.rebinds and patch.why


def test_each_fairseq_symbol_is_rebound_by_one_fix():
    rebound = [symbol for patch in compat.PATCHES for symbol in patch.rebinds]
    assert len(rebound) == len(set(rebound)), sorted(s for s in rebound if rebound.count(s) > 1)


def test_a_fix_is_left_out_on_an_unknown_release_unless_its_probe_finds_the_bug():
    by_name = {p.module: p for p in compat.PATCHES}
    assert compat.applies(by_name["precision"], "0.12.3") == (True, None)
    ok, why = compat.applies(by_name["precision"], "0.14.0")
    assert not ok and "written for fairseq 0.12.2 and 0.12.3, not 0.14.0" in why
    # The installed fairseq drops the last batch: the probe finds the bug on any release.
    assert by_name["batching"].has_bug()
    assert compat.applies(by_name["batching"], "0.14.0") == (True, None)
    fixed = compat.Patch("batching", ("x",), "y", has_bug=lambda: False)
    ok, why = compat.applies(fixed, "0.14.0")
    assert not ok and "does not have the bug" in why


@pytest.mark.parametrize("switch", ["1", ""], ids=["off", "on"])
def test_no_compat_switch_applies_nothing(switch):
    code = ("import logging; logging.basicConfig(level=logging.WARNING)\n"
            "import fairseq_sparse; fairseq_sparse.load_plugin()\n"
            "from fairseq.data import data_utils; from fairseq.tasks import FairseqTask\n"
            "from fairseq_sparse import compat; from fairseq_sparse.compat import batching, precision\n"
            "print(data_utils.batch_by_size is batching.batch_by_size, FairseqTask.train_step is precision.train_step,"
            " len(compat.apply()))\n")
    env = dict(os.environ, FAIRSEQ_SPARSE_NO_COMPAT=switch)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if switch:
        assert proc.stdout.split() == ["False", "False", "0"]
        assert "FAIRSEQ_SPARSE_NO_COMPAT is set: no fairseq fix is applied" in proc.stderr
    else:
        assert proc.stdout.split() == ["True", "True", str(len(compat.PATCHES))]
