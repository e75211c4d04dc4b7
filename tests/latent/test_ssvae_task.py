"""The ssvae experiment through fairseq-train with every categorical estimator of the registry."""

import re

import pytest

from fairseq_sparse.latent import ESTIMATORS, Categorical
from tests.conftest import REPO, run_cli, shared_data, train_metrics, valid_metrics

COMMON = ["--user-dir", REPO / "fairseq_sparse", "--task", "ssvae", "--arch", "ssvae",
          "--criterion", "latent_marginalization", "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "64",
          "--cpu", "--num-workers", "0", "--no-save", "--log-format", "simple", "--hidden-dim", "64"]
CATEGORICAL = sorted(name for name, cls in ESTIMATORS.items() if Categorical in cls.spaces)


@pytest.mark.parametrize("estimator", CATEGORICAL)
def test_every_estimator_trains_on_digits_without_data(estimator, tmp_path):
    proc = run_cli("fairseq-train", *COMMON, "--estimator", estimator, "--dataset", "digits", "--max-update", "6",
                   "--summed" if estimator == "sum_and_sample" else "--topk", "3", "--set-size", "3", cwd=tmp_path)
    metrics = valid_metrics(proc.stdout)
    assert 0 <= metrics["accuracy"] <= 100 and metrics["loss"] > 0
    calls = metrics["decoder_calls"]
    expected = {"dense": 10, "sfe": 1, "nvil": 1, "gumbel": 1, "st_gumbel": 1, "sfe_plus": 2, "sum_and_sample": 4,
                "unordered_set": 3}
    if estimator in expected:
        assert calls == expected[estimator]
    else:  # sparse marginalisation decodes the support only
        assert 1 <= calls <= (3 if estimator == "topk_sparsemax" else 10)


def test_bit_vector_estimators_are_refused_by_name(tmp_path):
    proc = run_cli("fairseq-train", *COMMON, "--estimator", "sparsemap", "--max-update", "1", cwd=tmp_path,
                   check=False)
    assert proc.returncode != 0 and "--estimator sparsemap: needs a bit-vector latent space" in proc.stderr


def test_sparse_marginalisation_learns_with_few_decoder_calls(tmp_path):
    """10 epochs on the digits: accuracy well above chance while the support shrinks."""
    proc = run_cli("fairseq-train", *COMMON, "--estimator", "sparsemax", "--dataset", "digits", "--max-epoch", "10",
                   cwd=tmp_path)
    first, last = [valid_metrics(line) for line in proc.stdout.splitlines() if "valid on 'valid' subset" in line][::9]
    assert last["accuracy"] > 70 and last["decoder_calls"] < first["decoder_calls"]


def test_mnist_from_shared_data(tmp_path):
    mnist = shared_data("images", "mnist")
    proc = run_cli("fairseq-train", mnist, *COMMON, "--estimator", "sparsemax", "--dataset", "mnist",
                   "--max-update", "3", "--disable-validation", cwd=tmp_path)
    split = re.search(r"ssvae mnist: 8000 train \((\d+) labelled\) / 1000 valid / 1000 test images of 784 pixels",
                      proc.stdout)
    assert split and 790 <= int(split.group(1)) <= 810  # 10% of each class, rounded per class
    missing = run_cli("fairseq-train", tmp_path, *COMMON, "--dataset", "mnist", "--max-update", "1", cwd=tmp_path,
                      check=False)
    assert missing.returncode != 0 and "mnist.npz is missing" in missing.stderr


def test_labelled_only_warm_start_then_the_whole_objective(tmp_path):
    """The paper's protocol: train on the labelled images alone, then fine-tune the whole
    objective from that checkpoint."""
    common = [a for a in COMMON if a != "--no-save"] + ["--estimator", "sparsemax", "--dataset", "digits"]
    warm = run_cli("fairseq-train", *common, "--labelled-only", "--max-epoch", "1", "--save-dir", tmp_path / "warm",
                   cwd=tmp_path)
    labelled = int(re.search(r"ssvae digits: 1439 train \((\d+) labelled, trained on alone\)", warm.stdout).group(1))
    assert 140 <= labelled <= 150  # 10% of each class of the 1,439 training digits
    # One epoch of the labelled images alone: ceil(labelled / 64) updates, no image left to marginalise.
    epoch = train_metrics(warm.stdout)[0]
    assert epoch["num_updates"] == -(-labelled // 64) and epoch.get("decoder_calls", 0) == 0
    full = run_cli("fairseq-train", *common, "--max-update", "2", "--finetune-from-model",
                   tmp_path / "warm" / "checkpoint_last.pt", "--save-dir", tmp_path / "full", cwd=tmp_path)
    assert "loaded checkpoint" in full.stdout.lower() and "1439 train (" in full.stdout
    assert valid_metrics(full.stdout)["decoder_calls"] >= 1


@pytest.mark.parametrize("options, message", [
    (["--latent-dim", "-3"], "--latent-dim -3: must be at least 1"),
    (["--hidden-dim", "0"], "--hidden-dim 0: must be at least 1"),
    (["--labelled-fraction", "0"], r"--labelled-fraction 0.0: must lie in \(0, 1\]"),
    (["--labelled-fraction", "1.5"], r"--labelled-fraction 1.5: must lie in \(0, 1\]"),
])
def test_bad_sizes_and_fractions_are_refused_by_name(tmp_path, options, message):
    proc = run_cli("fairseq-train", *COMMON, "--estimator", "sparsemax", "--dataset", "digits", "--max-update", "1",
                   *options, cwd=tmp_path, check=False)
    assert proc.returncode != 0 and re.search(message, proc.stderr), proc.stderr[-1500:]
