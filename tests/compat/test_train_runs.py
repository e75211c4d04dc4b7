"""One live fairseq-train run per --save-dir, and a finished run's rerun trains nothing and
writes nothing (fairseq_sparse.compat.train_runs)."""

import torch

import fairseq_sparse
fairseq_sparse.load_plugin()

from fairseq_sparse.compat.train_runs import LOCK_NAME, lock_save_dir, release  # noqa: E402
from tests.ape.test_task import TRAIN  # noqa: E402
from tests.conftest import run_cli  # noqa: E402


def updates(checkpoint):
    return torch.load(checkpoint)["optimizer_history"][-1]["num_updates"]


def test_a_save_dir_held_by_a_live_run_is_refused_naming_it(tmp_path, ape_raw, tiny_bert):
    save = tmp_path / "ckpt"
    common = [ape_raw, *TRAIN, "--bert-model", tiny_bert, "--save-dir", save, "--max-update", "2"]
    held = lock_save_dir(save)  # what a live run holds while it trains
    try:
        second = run_cli("fairseq-train", *common, "--seed", "2", check=False)
    finally:
        release(held)
    assert second.returncode != 0
    assert f"--save-dir {save}: another fairseq-train run (pid " in second.stderr
    assert not (save / "checkpoint_last.pt").exists(), "the refused run wrote nothing"
    # A killed run leaves its lock file, but not its lock: the next run trains.
    (save / LOCK_NAME).write_text("pid 1 on a host that is gone\n")
    run_cli("fairseq-train", *common)
    assert updates(save / "checkpoint_last.pt") == 2
    assert not (save / LOCK_NAME).exists(), "the lock file goes with the run"


def test_a_second_lock_of_one_directory_is_refused_and_free_again_once_released(tmp_path):
    first = lock_save_dir(tmp_path)
    try:
        lock_save_dir(tmp_path)
    except RuntimeError as e:
        assert f"--save-dir {tmp_path}: another fairseq-train run (pid " in str(e)
    else:
        raise AssertionError("a held save dir was locked twice")
    release(first)
    release(lock_save_dir(tmp_path))


def test_rerunning_a_finished_run_trains_nothing_and_changes_no_file(tmp_path, ape_raw, tiny_bert):
    save = tmp_path / "ckpt"
    common = [ape_raw, *TRAIN, "--bert-model", tiny_bert, "--save-dir", save, "--max-update", "3"]
    run_cli("fairseq-train", *common)
    files = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in save.iterdir()}
    assert updates(save / "checkpoint_last.pt") == 3
    again = run_cli("fairseq-train", *common)
    assert "nothing to train: it has reached --max-update 3 (3 updates)" in again.stdout + again.stderr
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in save.iterdir()} == files
    more = run_cli("fairseq-train", *common[:-1], "5")  # a larger budget still resumes
    assert "nothing to train" not in more.stdout + more.stderr
    assert updates(save / "checkpoint_last.pt") == 5


def test_a_run_past_its_time_limit_is_finished_but_a_new_one_trains_its_first_update(tmp_path, ape_raw, tiny_bert):
    save = tmp_path / "ckpt"
    common = [ape_raw, *TRAIN, "--bert-model", tiny_bert, "--save-dir", save, "--stop-time-hours", "1e-9"]
    run_cli("fairseq-train", *common)
    assert updates(save / "checkpoint_last.pt") == 1, "a new run trains until the update that passes the limit"
    again = run_cli("fairseq-train", *common)
    assert "nothing to train: it has trained for" in again.stdout + again.stderr
    assert updates(save / "checkpoint_last.pt") == 1
