"""Importing the package: what it does to the process beyond registering things."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

PROGRAM = """
import logging
import fairseq_sparse
import matplotlib.pyplot  # logs its set-up at DEBUG level
print(logging.getLogger().getEffectiveLevel())
"""


@pytest.mark.parametrize("loglevel, level", [(None, "20"), ("DEBUG", "10")])
def test_import_leaves_the_root_logger_as_fairseq_s_clis_set_it(loglevel, level):
    """fairseq's import sets the root logger to DEBUG (wav2vec2_classification.py calls
    logging.basicConfig(level=DEBUG)); after importing fairseq_sparse it is $LOGLEVEL,
    INFO by default, as in fairseq-train, so a script prints no library's debug lines."""
    env = {k: v for k, v in os.environ.items() if k != "LOGLEVEL"}
    if loglevel:
        env["LOGLEVEL"] = loglevel
    proc = subprocess.run([sys.executable, "-c", PROGRAM], cwd=REPO, env=env, capture_output=True, text=True,
                          check=True)
    assert proc.stdout.split() == [level]
    assert ("DEBUG:matplotlib" in proc.stderr) == (loglevel == "DEBUG")
