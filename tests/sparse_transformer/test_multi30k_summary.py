"""How the Multi30k experiment reads a training's log: its validation curve and what ended it."""

import json

import pytest
import torch

from fairseq_sparse.sparse_transformer.experiment_multi30k import (ended_by, plot_validation_loss, stopped_early, training_seconds,
                                                        training_summary, validation_losses)


def valid_line(epoch, loss, updates):
    # fairseq-train --log-format json --log-file, as it logs the end of an epoch's validation.
    record = {"epoch": epoch, "valid_loss": f"{loss:.3f}", "valid_nll_loss": f"{loss - 0.5:.3f}",
              "valid_num_updates": str(updates), "valid_best_loss": f"{loss:.3f}"}
    return json.dumps(record)


def write_log(save, losses, stopped=False):
    lines = ["task: TranslationTask"]
    for epoch, loss in losses:
        train = {"epoch": epoch, "train_loss": f"{loss + 0.3:.3f}", "train_wps": "2000",
                 "train_num_updates": str(264 * epoch), "train_wall": str(60 * epoch)}
        lines += [json.dumps(train), valid_line(epoch, loss, 264 * epoch)]
    if stopped:
        lines.append("early stop since valid performance hasn't improved for last 2 runs")
    save.mkdir(parents=True, exist_ok=True)
    (save / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_validation_losses_keep_the_last_record_of_each_epoch(tmp_path):
    write_log(tmp_path, [(1, 7.5), (2, 5.25), (3, 5.5)])
    with (tmp_path / "train.log").open("a", encoding="utf-8") as log:  # a resumed run logs epoch 3 again
        log.write(valid_line(3, 5.0, 792) + "\n")
    assert validation_losses(tmp_path / "train.log") == {1: 7.5, 2: 5.25, 3: 5.0}


@pytest.mark.parametrize("stopped, epochs, max_epoch, expected", [
    (True, 4, 60, "plateau (--patience)"),
    (False, 4, 4, "epoch cap"),
    (False, 4, 60, "time cap (--stop-time-hours)"),
])
def test_ended_by_names_what_stopped_the_training(tmp_path, stopped, epochs, max_epoch, expected):
    write_log(tmp_path, [(e, 6.0 - 0.1 * e) for e in range(1, epochs + 1)], stopped=stopped)
    assert ended_by(tmp_path, epochs, max_epoch) == expected


def write_last_checkpoint(save, seconds):
    # What fairseq's trainer keeps of its clock in checkpoint_last.pt.
    torch.save({"extra_state": {"previous_training_time": seconds}}, save / "checkpoint_last.pt")


@pytest.mark.parametrize("seconds, epochs, max_epoch, expected", [
    (361.0, 2, 2, "time cap (--stop-time-hours)"),  # the cap fell in the last epoch: not the epoch cap
    (350.0, 2, 2, "epoch cap"),
    (350.0, 35, 60, "time cap (--stop-time-hours)"),  # stopped before an epoch, past the cap by then
])
def test_ended_by_reads_the_training_clock_against_the_time_cap(tmp_path, seconds, epochs, max_epoch, expected):
    write_log(tmp_path, [(e, 6.0 - 0.1 * e) for e in range(1, epochs + 1)])
    write_last_checkpoint(tmp_path, seconds)
    assert ended_by(tmp_path, epochs, max_epoch, stop_time_hours=0.1) == expected


def test_training_time_is_the_checkpoints_clock_across_resumptions(tmp_path):
    # A resumed run's log restarts train_wall (here at 60 s an epoch from each start); the
    # checkpoint's cumulative training time does not.
    save = tmp_path / "alpha_entmax"
    write_log(save, [(1, 6.0), (2, 5.9), (3, 5.8)])
    with (save / "train.log").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"epoch": 4, "train_loss": "5.0", "train_wps": "3000", "train_num_updates": "1056",
                              "train_wall": "0"}) + "\n")
    write_last_checkpoint(save, 251.5)
    assert training_seconds(save) == 251.5
    checkpoint, wps, epochs, updates, wall = training_summary(tmp_path, "alpha_entmax")
    assert (checkpoint, epochs, updates, wall) == (save / "checkpoint_best.pt", 4, 1056, 251.5)
    assert wps == pytest.approx(2250.0)


def test_a_plateau_is_remembered_after_the_log_is_gone(tmp_path):
    # A rerun must not train a plateaued model again, even once its log has been replaced.
    write_log(tmp_path, [(1, 6.0), (2, 6.1), (3, 6.2)], stopped=True)
    assert stopped_early(tmp_path)
    write_log(tmp_path, [(1, 6.0)])
    assert stopped_early(tmp_path)
    assert not stopped_early(tmp_path / "other")


def test_validation_loss_figure_is_written(tmp_path):
    curves = {"softmax": {e: 9 / e + 4 for e in range(1, 31)}, "alpha_entmax": {e: 9 / e + 4.02 for e in range(1, 25)}}
    plot_validation_loss(curves, tmp_path / "validation_loss.png")
    assert (tmp_path / "validation_loss.png").stat().st_size > 5000
