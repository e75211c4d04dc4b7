"""scripts/bitvector_sparsemap_support.py on a few real MNIST images: every variant's
per-epoch record, its test NLL and the plot; bad sizes named."""

import json

import pytest

from tests.conftest import run_script, shared_data

SCRIPT = "bitvector_sparsemap_support.py"


def test_support_measurement(tmp_path):
    mnist = shared_data("images", "mnist-full")
    proc = run_script(SCRIPT, "--out", tmp_path, "--data", mnist, "--images", "32", "--epochs", "2", "--bits", "6",
                      "--nll-samples", "2", "--test-images", "100", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "support.json").read_text())["results"]
    assert set(results) == {"sparsemap, 1 bit state", "sparsemap, 2 bit states (paper's factor)", "gumbel"}
    for variant, result in results.items():
        assert [row["epoch"] for row in result["epochs"]] == [1, 2]
        for row in result["epochs"]:
            if variant == "gumbel":
                assert row["decoder_calls"] == 1 and "single_code_fraction" not in row
            else:  # at most the 2^6 codes; a single code is exactly where no bit is fractional
                assert 1 <= row["decoder_calls"] <= 2 ** 6
                assert 0 <= row["single_code_fraction"] <= 1 and 0 <= row["fractional_bit_fraction"] <= 1
            assert row["encoder_grad_norm"] >= 0 and 0 < row["neg_elbo_bits_per_dim"] < 9
        # The importance-sampled NLL is a tighter bound than -ELBO (up to sampling noise).
        assert 0 < result["test"]["nll_bits_per_dim"] <= result["test"]["neg_elbo_bits_per_dim"] + 0.05
    assert (tmp_path / "support.png").stat().st_size > 10000


@pytest.mark.parametrize("option, message", [
    ("--images", "--images 70000: must be 1 to the 60000 training images"),
    ("--test-images", "--test-images 70000: must be 1 to the 10000 test images")])
def test_bad_image_count_is_named(tmp_path, option, message):
    mnist = shared_data("images", "mnist-full")
    proc = run_script(SCRIPT, "--out", tmp_path, "--data", mnist, option, "70000", timeout=300)
    assert proc.returncode != 0 and message in proc.stderr
