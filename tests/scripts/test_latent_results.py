"""scripts/latent_results.py: a small grid through fairseq-train, tabulated next to the
paper's numbers, with the decoder-calls plot; a second call collects without training."""

import dataclasses
import json
from pathlib import Path

import pytest

from fairseq_sparse.latent.experiment_grid import LatentResultsConfig, grid, table
from tests.conftest import run_script


def run(*args):
    proc = run_script("latent_results.py", *args, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_grid_tables_and_plot(tmp_path):
    out = tmp_path / "grid"
    # Six short runs (one estimator per experiment, two seeds), mostly start-up; each
    # estimator's decoder calls are tested with the tasks (tests/latent).
    run("--out", out, "--experiments", "ssvae", "signaling_game", "bitvector_vae/32", "--estimators", "sparsemax",
        "sparsemap", "--seeds", "2", "--epochs", '{"ssvae": 2, "signaling_game": 1, "bitvector_vae": 1}',
        "--jobs", "2")
    tables = (out / "tables.md").read_text()
    assert "### ssvae" in tables and "### signaling_game" in tables and "### bitvector_vae/32 (lower is better)" in tables
    assert "| sparsemax |" in tables and "| 96.87 | 1.01 |" in tables  # the paper's sparsemax row, next to ours
    assert "decoder calls (training mean) | decoder calls (last epoch)" in tables
    assert "| sparsemap |" in tables and "| 3.72 |" in tables
    assert "Mean ± standard deviation over 2 seeds." in tables
    results = json.loads((out / "results.json").read_text())
    ssvae = results["ssvae"]["sparsemax"]
    assert len(ssvae) == 2 and len(ssvae[0]["train_calls"]) == 2 and 0 <= ssvae[0]["test"]["accuracy"] <= 100
    curve = ssvae[0]["test_curve"]  # the test metrics of every validated epoch, the last one reported
    assert [row["epoch"] for row in curve] == [1, 2] and curve[-1] == ssvae[0]["test"]
    assert set(results["bitvector_vae/32"]) == {"sparsemap"} and len(results["bitvector_vae/32"]["sparsemap"]) == 2
    assert (out / "decoder_calls.png").stat().st_size > 10000
    # Collecting again reads the logs: nothing is retrained, the tables are the same.
    logs = sorted((out / "logs").rglob("*.log"))
    stamps = [p.stat().st_mtime_ns for p in logs]
    again = run("--out", out, "--experiments", "ssvae", "signaling_game", "bitvector_vae/32", "--estimators",
                "sparsemax", "sparsemap", "--seeds", "2", "--collect-only")
    assert [p.stat().st_mtime_ns for p in logs] == stamps
    assert again.stdout.strip().split("\n", 1)[0] == f"6 runs, 1 at a time; each run's fairseq-train log is in {out / 'logs'}"
    assert again.stdout.count(": done in ") == 6 and "[6/6] " in again.stdout  # each run is said as it ends
    assert "\n### ssvae" in again.stdout and (out / "tables.md").read_text() == tables


def test_ssvae_warm_start_then_the_whole_objective_from_its_checkpoint(tmp_path):
    out = tmp_path / "warm"
    run("--out", out, "--experiments", "ssvae", "--estimators", "sparsemax", "--seeds", "1", "--epochs",
        '{"ssvae": 1}', "--warm-start-epochs", "2", "--fairseq-args", "--lr 5e-4")
    warm_log = (out / "logs" / "ssvae" / "sparsemax_seed1.warm.log").read_text()
    assert "'labelled_only': True" in warm_log and "'lr': [0.001]" in warm_log and "done training" in warm_log
    log = (out / "logs" / "ssvae" / "sparsemax_seed1.log").read_text()
    assert "loading pretrained model from" in log and "warm_start/checkpoint_last.pt" in log
    assert "'labelled_only': False" in log and "'lr': [0.0005]" in log
    results = json.loads((out / "results.json").read_text())["ssvae"]["sparsemax"][0]
    assert len(results["warm_start"]["train_calls"]) == 2 and len(results["train_calls"]) == 1
    assert 0 <= results["warm_start"]["test"]["accuracy"] <= 100


def test_a_grid_trained_on_keeps_the_epochs_of_its_first_run(tmp_path):
    # --keep-checkpoints: rerun with more epochs, each run goes on from its checkpoint, and
    # its log, appended to, still holds the first run's epochs.
    out = tmp_path / "on"
    common = ["--out", out, "--experiments", "ssvae", "--estimators", "sparsemax", "--seeds", "1",
              "--keep-checkpoints"]
    run(*common, "--epochs", "1")  # a number: every experiment's
    run(*common, "--epochs", '{"ssvae": 2}')
    log = (out / "logs" / "ssvae" / "sparsemax_seed1.log").read_text()
    assert log.count("done training") == 2 and "Loaded checkpoint" in log and "(epoch 2 @" in log
    results = json.loads((out / "results.json").read_text())["ssvae"]["sparsemax"][0]
    assert len(results["train_calls"]) == 2 and [row["epoch"] for row in results["test_curve"]] == [1, 2]


def test_warm_start_is_refused_without_ssvae(tmp_path):
    proc = run_script("latent_results.py", "--out", tmp_path, "--experiments", "signaling_game",
                      "--warm-start-epochs", "2", timeout=300)
    assert proc.returncode == 2 and "--warm-start-epochs applies to the ssvae experiment only" in proc.stderr


@pytest.mark.parametrize("option, message", [
    (["--seeds", "0"], "argument --seeds: must be at least 1, not 0"),
    (["--jobs", "0"], "argument --jobs: must be at least 1, not 0"),
    (["--warm-start-epochs", "-1"], "argument --warm-start-epochs: must be at least 0, not -1"),
    (["--epochs", '{"ssvae": 0}'], "--epochs: 'ssvae': 0; give each of ssvae, signaling_game, bitvector_vae"),
    (["--epochs", '{"ssave": 2}'], "--epochs: 'ssave': 2;"),
    (["--epochs", "[2]"], "--epochs [2]: give a number, or a JSON object"),
    (["--epochs", "0"], "--epochs: 'ssvae': 0; give each of ssvae, signaling_game, bitvector_vae"),
])
def test_bad_counts_are_errors_naming_the_option(tmp_path, option, message):
    # (An epoch count of 0 would reach fairseq-train as --max-epoch 0: no limit.)
    proc = run_script("latent_results.py", "--out", tmp_path, *option, timeout=300)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "logs").exists()


def test_table_names_the_seeds_of_each_estimator_when_they_differ():
    def run(success):
        return {"test": {"success": success}, "train_calls": [3.0, 1.0]}

    uneven = table("signaling_game", {"dense": [run(90.0)], "sparsemax": [run(91.0), run(93.0)]})
    assert "| sparsemax | 92.00 ± 1.41 | 2.00 ± 0.00 | 1.00 ± 0.00 | 93.35 | 3.13 |" in uneven
    assert "| dense | 90.00 | 2.00 | 1.00 |" in uneven, "one seed has no spread to print"
    assert uneven.endswith("Mean ± standard deviation over the seeds of each estimator: dense 1, sparsemax 2.")
    even = table("signaling_game", {"dense": [run(90.0)], "sparsemax": [run(91.0)]})
    assert even.endswith("One seed: no spread.") and "±" not in even
    assert "| paper (MNIST) |" in even


def test_a_table_of_another_setting_than_the_papers_says_so():
    runs = {"sparsemax": [{"test": {"accuracy": 80.0}, "train_calls": [1.0, 1.0]}]}
    assert table("ssvae", runs, "digits").endswith(
        "These runs: scikit-learn's 8x8 digits, 2 epochs. The paper's columns are full MNIST at its own training "
        "length: a setting these runs do not share, so not a target for them.")
    assert "These runs" not in table("ssvae", runs, "mnist")
    runs["dense"] = [{"test": {"accuracy": 80.0}, "train_calls": [1.0] * 5}]
    assert "These runs: scikit-learn's 8x8 digits, 2 to 5 epochs." in table("ssvae", runs, "digits")


def test_bit_vector_rows_keep_three_decimals():
    """Bit-vector estimators differ by hundredths of a bit: two decimals would tie them."""
    def run(nll, elbo):
        return {"test": {"nll_bits_per_dim": nll, "neg_elbo_bits_per_dim": elbo}, "train_calls": [2.0, 1.0]}

    rows = table("bitvector_vae/32", {"gumbel": [run(1.5663, 1.5657)], "sfe_plus": [run(1.5074, 1.5209)]})
    assert "| gumbel | 1.566 | 1.566 | 1.50 | 1.00 | 3.57 |  |" in rows
    assert "| sfe_plus | 1.507 | 1.521 |" in rows


def test_first_seed_adds_seeds_to_an_earlier_grid():
    """Seeds 2 and 3 of a grid whose seed 1 ran before: the runs (and so the log names) are 2 and 3."""
    config = LatentResultsConfig(out=Path("grid"), experiments=("bitvector_vae/32",), estimators=("gumbel", "sfe_plus"),
                                 seeds=2, first_seed=2)
    assert grid(config) == [("bitvector_vae/32", "gumbel", 2), ("bitvector_vae/32", "gumbel", 3),
                            ("bitvector_vae/32", "sfe_plus", 2), ("bitvector_vae/32", "sfe_plus", 3)]
    assert [seed for _, _, seed in grid(dataclasses.replace(config, first_seed=1, seeds=3))][:3] == [1, 2, 3]


def test_the_configuration_is_checked_in_python_as_on_the_command_line():
    assert LatentResultsConfig(out=Path("grid"), epochs=4).epochs == dict.fromkeys(
        ("ssvae", "signaling_game", "bitvector_vae"), 4)
    assert LatentResultsConfig(out=Path("grid"), epochs={"ssvae": 2}).epochs["bitvector_vae"] == 10
    with pytest.raises(ValueError, match="--seeds 0: must be at least 1"):
        LatentResultsConfig(out=Path("grid"), seeds=0)
    with pytest.raises(ValueError, match="--warm-start-epochs applies to the ssvae experiment only"):
        LatentResultsConfig(out=Path("grid"), experiments=("signaling_game",), warm_start_epochs=2)


def test_decoder_calls_figure_has_whole_epochs_and_readable_call_axes(tmp_path):
    """Epoch ticks fell at 1.2, and a log axis over 9 to 10 calls was labelled 10^1 and 9x10^0 only."""
    from fairseq_sparse.latent.experiment_grid import plot

    def run(calls, metric, value):
        return {"train_calls": calls, "test_curve": [{"epoch": len(calls), metric: value}]}

    fig = plot({"ssvae": {"dense": [run([10.0, 10.0], "accuracy", 86.0)], "sparsemax": [run([9.5, 9.2], "accuracy", 85.0)]},
                "signaling_game": {"dense": [run([256.0] * 3, "success", 50.0)], "sparsemax": [run([5.0, 3.0, 2.0], "success", 40.0)]}},
               tmp_path / "calls.png")
    (ssvae_calls, game_calls), (ssvae_metric, game_metric) = fig.axes[0:2], fig.axes[2:4]
    for ax in fig.axes[:4]:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks)
    assert ssvae_calls.get_yscale() == "linear" and game_calls.get_yscale() == "log"
    labels = [t.get_text() for t in game_calls.get_yticklabels() if t.get_text()]
    assert "10" in labels and "100" in labels and not any("times" in x or "^" in x for x in labels)
    assert game_metric.get_xlim() == game_calls.get_xlim()
