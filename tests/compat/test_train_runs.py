"""One live fairseq-train run per --save-dir, a resumed run counts --patience on, and a finished
run's rerun trains nothing and writes nothing (fairseq_sparse.compat.train_runs)."""

import torch

import fairseq_sparse
fairseq_sparse.load_plugin()

from fairseq_sparse.compat.train_runs import LOCK_NAME, lock_save_dir, release  # noqa: E402
from fairseq_sparse.compat.trainer_state import PATIENCE  # noqa: E402
from fairseq_sparse.sparse_transformer.experiment_multi30k import checkpoint_epoch, epoch_checkpoints  # noqa: E402
from tests.ape.test_task import TRAIN  # noqa: E402
from tests.compat.test_checkpoints import TINY_TRANSFORMER  # noqa: E402
from tests.conftest import REPO, run_cli  # noqa: E402


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


def last_epoch(save):
    """The last epoch trained into ``save``: that of its newest checkpoint{N}.pt."""
    return checkpoint_epoch(epoch_checkpoints(save)[-1])


def test_patience_counts_on_across_a_resumption_and_a_plateau_stays_finished(multi30k_bin, tmp_path):
    # At learning rate 0 the validation loss never improves after epoch 1: --patience 2 stops
    # an uninterrupted run after epoch 3.
    common = [multi30k_bin, "--user-dir", REPO / "fairseq_sparse", *TINY_TRANSFORMER, "--lr", "0", "--patience", "2"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    run_cli("fairseq-train", *common, "--save-dir", straight, "--max-epoch", "10")
    assert last_epoch(straight) == 3

    run_cli("fairseq-train", *common, "--save-dir", split, "--max-epoch", "2")  # interrupted after epoch 2
    resumed = run_cli("fairseq-train", *common, "--save-dir", split, "--max-epoch", "10")
    assert "early stop since valid performance hasn't improved for last 2 runs" in resumed.stdout + resumed.stderr
    assert last_epoch(split) == 3, "the resumed run stops where the uninterrupted one did"

    files = {p.name: p.stat().st_mtime_ns for p in split.iterdir()}
    again = run_cli("fairseq-train", *common, "--save-dir", split, "--max-epoch", "10")
    assert ("nothing to train: it stopped at its validation plateau, no better loss in its last 2 validations "
            "(--patience 2)") in again.stdout + again.stderr
    assert {p.name: p.stat().st_mtime_ns for p in split.iterdir()} == files
    run_cli("fairseq-train", *common[:-1], "3", "--save-dir", split, "--max-epoch", "10")  # more patience trains on
    assert last_epoch(split) == 4

    # A checkpoint written without the count resumes counting from its best validation.
    state = torch.load(straight / "checkpoint2.pt")
    del state["extra_state"][PATIENCE]
    old = tmp_path / "old"
    old.mkdir()
    torch.save(state, old / "checkpoint_last.pt")
    run_cli("fairseq-train", *common, "--save-dir", old, "--max-epoch", "10")
    assert last_epoch(old) == 4


def test_a_restore_file_that_does_not_exist_is_an_error_naming_it(tmp_path, ape_raw, tiny_bert):
    save = tmp_path / "ckpt"
    common = [ape_raw, *TRAIN, "--bert-model", tiny_bert, "--save-dir", save, "--max-update", "1"]
    for option in ("--restore-file", "--continue-once"):
        proc = run_cli("fairseq-train", *common, option, tmp_path / "typo.pt", check=False)
        assert proc.returncode != 0 and f"{option} {tmp_path / 'typo.pt'}: no such checkpoint" in proc.stderr
        assert not (save / "checkpoint_last.pt").exists(), "nothing was trained from scratch"


def test_a_save_dir_of_another_tasks_run_is_named(tmp_path, ape_raw, tiny_bert):
    """Two runs with fairseq's default --save-dir: the second failed with "please ensure that the
    architectures match", not naming the run that wrote the checkpoint."""
    save = tmp_path / "checkpoints"
    run_cli("fairseq-train", ape_raw, *TRAIN, "--bert-model", tiny_bert, "--save-dir", save, "--max-update", "1")
    proc = run_cli("fairseq-train", "--user-dir", REPO / "fairseq_sparse", "--task", "ssvae", "--arch", "ssvae",
                   "--criterion", "latent_marginalization", "--estimator", "sparsemax", "--dataset", "digits",
                   "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "64", "--max-update", "1", "--cpu",
                   "--num-workers", "0", "--save-dir", save, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert ("It was written by a run of --task ape --arch bert_ape, not this run's --task ssvae --arch ssvae: give "
            "this run its own --save-dir") in proc.stderr
