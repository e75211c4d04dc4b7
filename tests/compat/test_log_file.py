"""--log-file holds each logged line once, however many epochs a run has
(fairseq_sparse.compat.log_file)."""

import json
import logging

import fairseq_sparse
from tests.conftest import REPO, run_cli

fairseq_sparse.load_plugin()

from fairseq.logging import progress_bar  # noqa: E402

from fairseq_sparse.compat import log_file  # noqa: E402


def test_the_installed_fairseq_attaches_a_handler_per_progress_bar():
    """The bug, in fairseq's own function (the probe leaves its logger as it found it)."""
    before = list(progress_bar.logger.handlers)
    assert log_file.adds_a_handler_per_progress_bar()
    assert progress_bar.logger.handlers == before


def test_progress_bars_of_one_log_file_share_one_handler(tmp_path):
    path = tmp_path / "train.log"
    before = list(progress_bar.logger.handlers)
    try:
        for epoch in range(3):  # positional and keyword log_file alike
            progress_bar.progress_bar([], "none", 100, str(path), epoch=epoch)
            progress_bar.progress_bar([], log_format="none", log_file=str(path), epoch=epoch)
        added = [h for h in progress_bar.logger.handlers if h not in before]
        assert len(added) == 1 and isinstance(added[0], logging.FileHandler)
    finally:
        for handler in progress_bar.logger.handlers[:]:
            if handler not in before:
                progress_bar.logger.removeHandler(handler)
                handler.close()


def test_a_run_of_several_epochs_logs_each_line_once(tmp_path):
    log = tmp_path / "train.log"
    run_cli("fairseq-train", "--user-dir", REPO / "fairseq_sparse", "--task", "length_extrapolation",
            "--synthetic-task", "copy", "--min-length", "3", "--max-length", "5", "--train-examples", "64",
            "--valid-examples", "8", "--test-examples", "4", "--test-factors", "1", "--arch",
            "entmax_transformer_lm_tiny", "--decoder-layers", "1", "--criterion", "cross_entropy", "--optimizer",
            "adam", "--lr", "1e-3", "--batch-size", "32", "--max-epoch", "4", "--cpu", "--save-dir", tmp_path / "ckpt",
            "--num-workers", "0", "--no-save", "--log-format", "json", "--log-interval", "1", "--log-file", log)
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"')]
    valid = [r for r in records if "valid_loss" in r]
    assert [r["epoch"] for r in valid] == [1, 2, 3, 4]
    lines = [json.dumps(r, sort_keys=True) for r in records]
    assert len(lines) == len(set(lines)) and sum("train_loss" in r for r in records) == 4
