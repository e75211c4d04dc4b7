"""The command runner and fairseq log parser shared by the experiment scripts."""

import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
from cli_helpers import epoch_metrics, run_logged  # noqa: E402


def test_epoch_metrics_reads_every_subset_and_exponents():
    log = "\n".join([
        "2026-11-22 13:49:29 | INFO | train | epoch 001 | loss 1578.69 | gnorm 2.08011e+06 | lr 2e-05 | wps 55.3",
        "2026-11-22 13:48:46 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 971.521 | decoder_calls 1",
        "2026-11-22 13:49:29 | INFO | test | epoch 001 | valid on 'test' subset | nll_bits_per_dim 1.7926 | x -3.5e-3",
        "2026-11-22 13:49:30 | INFO | fairseq_cli.train | done training in 60.1 seconds",
    ])
    found = epoch_metrics(log)
    assert found["train"] == [{"epoch": 1.0, "loss": 1578.69, "gnorm": 2.08011e6, "lr": 2e-5, "wps": 55.3}]
    assert found["valid"][0]["decoder_calls"] == 1.0
    assert found["test"][0] == {"epoch": 1.0, "nll_bits_per_dim": 1.7926, "x": -3.5e-3}


def test_run_logged_streams_stdout_to_the_log_while_the_command_runs(tmp_path):
    log = tmp_path / "train.log"
    # The command itself checks that its first line is already in the log.
    check = ("import sys; print('epoch 1', flush=True); "
             "assert 'epoch 1' in open(sys.argv[1]).read(), 'not streamed'; sys.stderr.write('a warning')")
    proc = run_logged([sys.executable, "-c", check, log], log)
    assert proc.stdout == "epoch 1\n" and proc.stderr == "a warning"
    assert log.read_text() == "epoch 1\na warning"


def test_run_logged_stops_with_the_log_tail_when_the_command_fails(tmp_path):
    log = tmp_path / "train.log"
    with pytest.raises(SystemExit, match=r"failed \(3\); full log in .*train.log:\nlogged error\nTraceback"):
        run_logged([sys.executable, "-c", "import sys; print('logged error'); sys.stderr.write('Traceback'); sys.exit(3)"],
                   log)
