"""The bitvector_vae experiment through fairseq-train with every bit-vector estimator."""

import math

import pytest

from fairseq_sparse.latent import ESTIMATORS, BitVector
from tests.conftest import REPO, run_cli, shared_data, valid_metrics

COMMON = ["--user-dir", REPO / "fairseq_sparse", "--task", "bitvector_vae", "--arch", "bitvector_vae",
          "--criterion", "latent_marginalization", "--optimizer", "adam", "--lr", "2e-3", "--batch-size", "64",
          "--cpu", "--num-workers", "0", "--no-save", "--log-format", "simple"]
BIT_VECTOR = sorted(name for name, cls in ESTIMATORS.items() if BitVector in cls.spaces)


@pytest.mark.parametrize("estimator", BIT_VECTOR)
def test_every_estimator_trains_on_digits(estimator, tmp_path):
    proc = run_cli("fairseq-train", *COMMON, "--estimator", estimator, "--latent-bits", "16", "--max-update", "5",
                   "--topk", "4", "--nll-samples", "8", cwd=tmp_path)
    metrics = valid_metrics(proc.stdout)
    # 17 grey levels: a model knowing nothing pays log2(17) = 4.09 bits per pixel.
    assert 0 < metrics["nll_bits_per_dim"] <= metrics["neg_elbo_bits_per_dim"] + 0.05
    assert metrics["neg_elbo_bits_per_dim"] < 4.2
    calls = metrics["decoder_calls"]
    if estimator.startswith("sparsemap"):
        assert 1 <= calls <= 17
    elif estimator == "topk_sparsemax":
        assert 1 <= calls <= 4
    else:
        assert calls == (2 if estimator == "sfe_plus" else 1)
    # H(q) in bits: at most log2 of the structures a sparse q holds (a mean over images of
    # entropies each within its own support: bounded by the largest support, 17 or 4),
    # at most the 16 bits of a mean-field one; mean |score| of an untrained encoder, small.
    bound = 16 if estimator in ("sfe", "sfe_plus", "nvil", "gumbel", "st_gumbel") else \
        math.log2(17 if estimator.startswith("sparsemap") else 4)
    assert 0 <= metrics["code_entropy_bits"] <= bound + 1e-3
    assert 0 < metrics["score_abs"] < 5


def test_sparsemap_budget_and_latent_bits_on_mnist(tmp_path):
    """... with the paper's two-state factor (--bit-states 2)."""
    mnist = shared_data("images", "mnist")
    proc = run_cli("fairseq-train", mnist, *COMMON, "--dataset", "mnist", "--estimator", "sparsemap_budget",
                   "--latent-bits", "32", "--budget", "4", "--bit-states", "2", "--max-update", "3",
                   "--nll-samples", "4", "--batch-size", "16", "--max-valid-steps", "2", cwd=tmp_path)
    assert "8000 train / 1000 valid / 1000 test images of 784 pixels, 256 grey levels; 32 latent bits" in proc.stdout
    metrics = valid_metrics(proc.stdout)
    assert metrics["neg_elbo_bits_per_dim"] < 8.0  # below a uniform 256-way guess


def test_bad_options_are_named(tmp_path):
    proc = run_cli("fairseq-train", *COMMON, "--estimator", "dense", "--max-update", "1", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "--estimator dense: works on Categorical latents, not BitVector(32" in proc.stderr
    proc = run_cli("fairseq-train", *COMMON, "--estimator", "sparsemap_budget", "--budget", "40", "--max-update", "1",
                   cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "--budget 40: must be 0 (half the bits) to the 32 latent bits" in proc.stderr
    proc = run_cli("fairseq-train", *COMMON, "--estimator", "sparsemap", "--bit-states", "3", "--max-update", "1",
                   cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "--bit-states 3: must be 1 or 2" in proc.stderr
