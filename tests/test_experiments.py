"""fairseq_sparse.experiments: the command runner and fairseq log parser the experiments share."""

import argparse
import subprocess
import sys

import pytest

from fairseq_sparse.configs import at_least
from fairseq_sparse.experiments import (MALLOC_KEEP, device_name, epoch_metrics, interval_metrics, job_env, run_logged,
                                        training_env)
from tests.conftest import run_script


def test_at_least_names_the_option_and_its_floor():
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--epochs", type=at_least(1))
    assert parser.parse_args(["--epochs", "1"]).epochs == 1
    for bad, message in (("0", "argument --epochs: must be at least 1, not 0"),
                         ("x", "argument --epochs: invalid int value: 'x'")):
        with pytest.raises(argparse.ArgumentError) as error:
            parser.parse_args(["--epochs", bad])
        assert str(error.value) == message


@pytest.mark.parametrize("script, option", [
    ("ape_demo.py", "--max-epoch"), ("multi30k_sparse_attention.py", "--max-epoch"),
    ("multi30k_sparse_attention.py", "--jobs"), ("bitvector_sparsemap_support.py", "--epochs")])
def test_scripts_refuse_a_count_of_zero_naming_the_option(script, option):
    # fairseq-train would read --max-epoch 0 as no limit; the parser stops it first.
    proc = run_script(script, option, "0", timeout=300)
    assert proc.returncode == 2 and f"argument {option}: must be at least 1, not 0" in proc.stderr, proc.stderr


def test_job_env_keeps_the_users_threads_and_otherwise_shares_the_cores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert job_env(1)["OMP_NUM_THREADS"] == "1"  # asked for one thread a run: not the 2 cores' 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert [job_env(jobs)["OMP_NUM_THREADS"] for jobs in (1, 6, 32)] == ["16", "2", "1"]


def test_job_env_keeps_freed_memory_unless_the_user_tunes_malloc(monkeypatch):
    for name in MALLOC_KEEP:
        monkeypatch.delenv(name, raising=False)
    assert {name: job_env(1)[name] for name in MALLOC_KEEP} == {
        "MALLOC_TRIM_THRESHOLD_": "1073741824", "MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TOP_PAD_": "268435456"}
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert job_env(1)["MALLOC_TRIM_THRESHOLD_"] == "0"


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


def test_epoch_metrics_keeps_the_later_entry_of_an_epoch_a_resumed_run_logs_again():
    # Killed after epoch 2 was logged and before it was saved: the resumed run (appended to
    # the same log) trains epoch 2 again.
    log = "\n".join([
        "2026-11-29 12:15:14 | INFO | train | epoch 001 | loss 0.9 | decoder_calls 256",
        "2026-11-29 12:17:03 | INFO | train | epoch 002 | loss 0.8 | decoder_calls 256",
        "2026-11-29 12:20:10 | INFO | fairseq.trainer | Loaded checkpoint checkpoint_last.pt (epoch 2 @ 782 updates)",
        "2026-11-29 12:22:03 | INFO | train | epoch 002 | loss 0.7 | decoder_calls 256",
        "2026-11-29 12:22:05 | INFO | test | epoch 002 | valid on 'test' subset | success 61.5",
    ])
    found = epoch_metrics(log)
    assert [(row["epoch"], row["loss"]) for row in found["train"]] == [(1, 0.9), (2, 0.7)]
    assert found["test"] == [{"epoch": 2.0, "success": 61.5}]


def test_interval_metrics_reads_train_inner_lines_and_keeps_a_resumed_update_once():
    log = "\n".join([
        "2026-11-25 18:26:17 | INFO | train_inner | epoch 001:      2 / 24 loss=181.745, decoder_calls=9.867, "
        "code_entropy_bits=0, score_abs=1.2e+02, wps=419, num_updates=2, lr=0.002, gnorm=29.376, wall=2",
        "2026-11-25 18:26:18 | INFO | train | epoch 001 | loss 180.255 | num_updates 4",
        "2026-11-25 18:26:19 | INFO | train_inner | epoch 001:      4 / 24 loss=nan, num_updates=4, wall=3",
        "2026-11-25 18:27:19 | INFO | train_inner | epoch 001:      4 / 24 loss=170.5, num_updates=4, wall=9",
    ])
    found = interval_metrics(log)
    assert [e["num_updates"] for e in found] == [2, 4]
    assert found[0] == {"loss": 181.745, "decoder_calls": 9.867, "code_entropy_bits": 0.0, "score_abs": 120.0,
                        "wps": 419.0, "num_updates": 2.0, "lr": 0.002, "gnorm": 29.376, "wall": 2.0}
    assert found[1]["loss"] == 170.5  # the resumed run's line, not the interrupted one's


def test_run_logged_streams_stdout_to_the_log_while_the_command_runs(tmp_path):
    log = tmp_path / "train.log"
    # The command itself checks that its first line is already in the log.
    check = ("import sys; print('epoch 1', flush=True); "
             "assert 'epoch 1' in open(sys.argv[1]).read(), 'not streamed'; sys.stderr.write('a warning')")
    proc = run_logged([sys.executable, "-c", check, log], log)
    assert proc.stdout == "epoch 1\n" and proc.stderr == "a warning"
    assert log.read_text() == "epoch 1\na warning"


def test_run_logged_appends_for_a_resumed_run_and_returns_its_output_alone(tmp_path):
    log = tmp_path / "train.log"
    run_logged([sys.executable, "-c", "print('epoch 1 ü')"], log)
    proc = run_logged([sys.executable, "-c", "print('epoch 2')"], log, append=True)
    assert proc.stdout == "epoch 2\n" and log.read_text(encoding="utf-8") == "epoch 1 ü\nepoch 2\n"
    run_logged([sys.executable, "-c", "print('anew')"], log)  # not resuming: a fresh log
    assert log.read_text() == "anew\n"


def test_run_logged_stops_with_the_log_tail_when_the_command_fails(tmp_path):
    log = tmp_path / "train.log"
    with pytest.raises(SystemExit, match=r"failed \(3\); full log in .*train.log:\nlogged error\nTraceback"):
        run_logged([sys.executable, "-c", "import sys; print('logged error'); sys.stderr.write('Traceback'); sys.exit(3)"],
                   log)
    # A module run as FAIRSEQ_TRAIN runs fairseq-train is named, not the interpreter.
    with pytest.raises(SystemExit, match=r"^no_such_module_here failed \(1\)"):
        run_logged([sys.executable, "-m", "no_such_module_here"], log)


def test_tf32_reaches_the_training_processes_torch():
    """--tf32 is PyTorch's own override in fairseq-train's environment: the torch installed
    here, started in that environment, allows TF32 products; without it, not (its default)."""
    ask = [sys.executable, "-c", "import torch; print(torch.backends.cuda.matmul.allow_tf32)"]
    for tf32, expected in ((True, "True"), (False, "False")):
        env = training_env("cuda", 2, tf32)
        assert (env is None) != tf32
        assert subprocess.run(ask, env=env, capture_output=True, text=True, check=True).stdout.strip() == expected


def test_the_device_column_names_the_precision_training_ran_in():
    assert device_name("cpu").startswith("CPU (") and device_name("cpu").endswith(" threads)")
    assert device_name("cpu", amp=True) == device_name("cpu") + ", mixed precision (bfloat16)"
    assert device_name("cpu", 2, amp=True).endswith(" threads a member), mixed precision (bfloat16)")
