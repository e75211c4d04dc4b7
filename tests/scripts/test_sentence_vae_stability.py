"""scripts/sentence_vae_stability.py on a small slice of real Yelp text: the table, the plot,
the frozen-encoder analysis, logs collected rather than rerun on a second call, and an
interrupted run resumed from its checkpoint with its earlier epochs kept, a finished
one trained on when asked for more epochs, and seeds added to a grid later; the baselines
option and the commands it makes."""

import argparse
import dataclasses
import json
import re
import statistics

import pytest

from fairseq_sparse.sentence_vae import experiment_stability
from fairseq_sparse.sentence_vae.experiment_stability import StabilityConfig, baselines
from tests.conftest import run_script, shared_data



def run(data, out, *extra, epochs=2):
    proc = run_script("sentence_vae_stability.py", data, "--out", out, "--seeds", "2", "--epochs", epochs,
                      "--hsvae-settings", "10,1", "--mat-vae-settings", "1,1", "--latent-dim", "6", "--embed-dim", "16",
                      "--hidden-dim", "32", "--batch-size", "32", "--jobs", "2", *extra, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def yelp_slice(tmp_path):
    yelp = shared_data("text", "yelp5")
    data = tmp_path / "yelp"
    data.mkdir()
    lines = (yelp / "valid.txt").read_text(encoding="utf-8").splitlines()
    for split, part in (("train", lines[:200]), ("valid", lines[200:260]), ("test", lines[260:320])):
        (data / f"{split}.txt").write_text("\n".join(part) + "\n", encoding="utf-8")
    return data


def test_stability_grid(tmp_path):
    data = yelp_slice(tmp_path)
    out = tmp_path / "stability"
    # Two objectives, two seeds each (the baselines' commands: test_baselines_and_their_commands).
    grid = ("--analyse", "--hsvae-options=--spike-std 0.05 --hard-slab --kl-z-estimate sample")
    proc = run(data, out, *grid)
    for row in ("| hsvae | (alpha, beta) = (10.0, 1.0) | 2 |", "| mat_vae | (psi, lambda) = (1.0, 1.0) | 2 |"):
        assert row in proc.stdout
    results = json.loads((out / "stability.json").read_text())
    runs = results["hsvae"]["10,1"]
    assert [run["seed"] for run in runs] == [1, 2] and len(runs[0]["valid"]) == 2
    assert 0 <= runs[0]["valid"][-1]["average_hoyer"] <= 1
    # The analysis of each run: its frozen-encoder classifier, without the end-to-end baseline.
    analysis = runs[0]["analysis"]
    assert analysis["objective"] == "hsvae" and 0 <= analysis["frozen_encoder_accuracy"] <= 100
    assert 0 <= analysis["frozen_encoder_accuracy_means"] <= 100
    assert "| the same on posterior means | the two on valid (to choose on) |" in proc.stdout
    # The valid column: mean ± std over the two seeds of each figure on valid's labelled sentences.
    on_valid = [[r["analysis"][key] for r in runs]
                for key in ("frozen_encoder_accuracy_valid", "frozen_encoder_accuracy_means_valid")]
    assert analysis["valid_labelled_sentences"] == 60
    assert (" | " + " / ".join(f"{statistics.mean(v):.2f} ± {statistics.stdev(v):.2f}" for v in on_valid) + " | "
            in proc.stdout.split("| hsvae |")[1].split("\n")[0])
    # Which dimensions the codes use at all, and how much of HSVAE's spike pattern the sentence decides.
    assert 0 <= analysis["active_units"] <= 6
    assert "| active units | spike pattern: bits the sentence decides / entropy |" in proc.stdout
    row = proc.stdout.split("| hsvae |")[1].split("\n")[0].rstrip(" |").split(" | ")
    assert float(row[-2].split(" ")[0]) == pytest.approx(sum(r["analysis"]["active_units"] for r in runs) / 2)
    bits = [sum(r["analysis"]["spike_pattern"][key] for r in runs) / 2 for key in ("information_bits", "entropy_bits")]
    assert row[-1] == f"{bits[0]:.2f} / {bits[1]:.2f}"
    assert proc.stdout.split("| mat_vae |")[1].split("\n")[0].rstrip(" |").endswith("| -")
    assert analysis["end_to_end_accuracy"] is None
    assert "| kl_z " in proc.stdout.split("| hsvae |")[1].split("\n")[0]  # HSVAE's KL terms, apart
    hsvae_log = (out / "logs" / "hsvae" / "10_1_seed1.log").read_text()
    assert "'spike_std': 0.05" in hsvae_log and "'hard_slab': True" in hsvae_log
    assert "'kl_z_estimate': sample" in hsvae_log
    assert "'spike_std'" not in (out / "logs" / "mat_vae" / "1_1_seed1.log").read_text()
    assert (out / "table.md").read_text().strip() == proc.stdout.split("\n\nplot:")[0].strip()
    assert (out / "stability.png").stat().st_size > 10000
    written = sorted((out / "logs").rglob("*.log")) + sorted((out / "analysis").rglob("analysis.json"))
    stamps = [p.stat().st_mtime_ns for p in written]
    assert run(data, out, *grid).stdout == proc.stdout and [p.stat().st_mtime_ns for p in written] == stamps


def test_an_interrupted_run_resumes_and_keeps_its_earlier_epochs(tmp_path):
    data = yelp_slice(tmp_path)
    out = tmp_path / "stability"
    run(data, out, "--seeds", "1", "--mat-vae-settings", "", epochs=1)
    log = out / "logs" / "hsvae" / "10_1_seed1.log"
    # As if killed after epoch 1: the log lacks its last line, the checkpoint is there.
    log.write_text(log.read_text().replace("done training", "killed"))
    run(data, out, "--seeds", "1", "--mat-vae-settings", "", "--analyse", epochs=2)
    text = log.read_text()
    assert text.count("done training") == 1 and "Loaded checkpoint" in text
    valid = json.loads((out / "stability.json").read_text())["hsvae"]["10,1"][0]["valid"]
    assert [epoch["epoch"] for epoch in valid] == [1, 2]
    # Rerun with more epochs, a finished run trains on from its checkpoint and is analysed
    # again into a directory of its own; the shorter run's analysis is kept as it was.
    analyses = out / "analysis" / "hsvae" / "10_1_seed1"
    analysed_at = (analyses / "epoch2" / "analysis.json").stat().st_mtime_ns
    run(data, out, "--seeds", "1", "--mat-vae-settings", "", "--analyse", epochs=3)
    assert log.read_text().count("done training") == 2
    run_3 = json.loads((out / "stability.json").read_text())["hsvae"]["10,1"][0]
    assert [epoch["epoch"] for epoch in run_3["valid"]] == [1, 2, 3]
    assert sorted(p.name for p in analyses.iterdir()) == ["epoch2", "epoch3"]
    assert (analyses / "epoch2" / "analysis.json").stat().st_mtime_ns == analysed_at
    assert run_3["analysis"] == json.loads((analyses / "epoch3" / "analysis.json").read_text())
    # A seed added to the grid later trains alone; asked for both, the grid collects both
    # and trains neither again.
    run(data, out, "--seeds", "1", "--first-seed", "2", "--mat-vae-settings", "", epochs=3)
    runs = json.loads((out / "stability.json").read_text())["hsvae"]["10,1"]
    assert [r["seed"] for r in runs] == [2] and log.read_text().count("done training") == 2
    run(data, out, "--seeds", "2", "--mat-vae-settings", "", epochs=3)
    runs = json.loads((out / "stability.json").read_text())["hsvae"]["10,1"]
    assert [r["seed"] for r in runs] == [1, 2] and log.read_text().count("done training") == 2
    assert (out / "logs" / "hsvae" / "10_1_seed2.log").read_text().count("done training") == 1


@pytest.mark.parametrize("option, value, interval", [
    ("--dropout", "1", "[0, 1)"), ("--dropout", "-0.1", "[0, 1)"), ("--dropout", "x", "[0, 1)"),
    ("--word-dropout", "1.5", "[0, 1]"), ("--word-dropout", "-0.1", "[0, 1]")])
def test_a_dropout_outside_0_1_is_an_error_naming_the_option(tmp_path, option, value, interval):
    proc = run_script("sentence_vae_stability.py", tmp_path, "--out", tmp_path / "out", f"{option}={value}")
    message = f"argument {option}: {value!r}: a probability in {interval}"
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("option", ["--seeds", "--epochs", "--jobs", "--batch-size"])
def test_a_count_of_zero_is_an_error_naming_the_option(tmp_path, option):
    # (--epochs 0 would reach fairseq-train as --max-epoch 0: no limit.)
    proc = run_script("sentence_vae_stability.py", tmp_path, "--out", tmp_path / "out", option, "0")
    assert proc.returncode == 2 and f"argument {option}: must be at least 1, not 0" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_baselines_and_their_commands(tmp_path):
    runs = baselines("elbo,1 elbo_l1,0.01,0.1 elbo_l2,0.5")
    assert runs == (("elbo", (1.0,)), ("elbo_l1", (0.01, 0.1)), ("elbo_l2", (0.5,)))
    args = StabilityConfig(data=tmp_path, out=tmp_path / "out", hsvae_options="--hard-slab", latent_dim=6,
                           embed_dim=16, hidden_dim=32, dropout=0.3, word_dropout=1.0, lr=1e-3, batch_size=32,
                           epochs=2, baselines=runs)
    cmd = experiment_stability.train_command(args, *runs[1], 1, tmp_path / "ckpt")
    assert "--cpu" in cmd
    assert "--cpu" not in experiment_stability.train_command(dataclasses.replace(args, gpu=True),
                                                  *runs[1], 1, tmp_path / "ckpt")
    assert cmd[cmd.index("--criterion") + 1] == "elbo_l1" and "--hard-slab" not in cmd  # hsvae's options are hsvae's
    assert cmd[cmd.index("--kl-weight") + 1] == "0.01" and cmd[cmd.index("--regularization-weight") + 1] == "0.1"
    assert cmd[cmd.index("--dropout") + 1] == "0.3"  # every run's, baselines' too
    assert cmd[cmd.index("--word-dropout") + 1] == "1.0"
    assert experiment_stability.run_name(*runs[1], 2) == "elbo_l1/0.01_0.1_seed2"
    assert experiment_stability.knob_names("elbo_l1") == "(psi, penalty)"
    for bad in ("hsvae,1", "elbo", "elbo_l1,1,2,3", "elbo,x"):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(repr(bad))):
            baselines(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="vae_l1 is now elbo_l1"):  # the former name
        baselines("vae_l1,0.01")
    # Python callers meet the command line's rules.
    with pytest.raises(ValueError, match="nothing to run"):
        StabilityConfig(data=tmp_path, out=tmp_path, hsvae_settings=(), mat_vae_settings=())
    with pytest.raises(ValueError, match=r"--dropout 1: a probability in \[0, 1\)"):
        StabilityConfig(data=tmp_path, out=tmp_path, dropout=1)
