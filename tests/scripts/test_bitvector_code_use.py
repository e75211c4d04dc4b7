"""scripts/bitvector_code_use.py on a checkpoint kept by ``latent_results.py
--keep-checkpoints``: the floor against a brute-force histogram, the swapped-code
reconstruction equal to the own-code one exactly when the decoder ignores its code, and
no encoder gradient left when every score is saturated."""

import math

import numpy as np
import pytest
import torch

from fairseq_sparse.latent.code_use import pixel_histogram_cross_entropy
from tests.conftest import run_script, shared_data


def test_histogram_cross_entropy_matches_brute_force():
    rng = np.random.default_rng(0)
    train, test = rng.integers(0, 4, (30, 3)), rng.integers(0, 4, (7, 3))
    expected = 0.0
    for pixel in range(3):
        counts = np.bincount(train[:, pixel], minlength=4)
        for value in test[:, pixel]:
            expected -= math.log2((counts[value] + 0.1) / (30 + 4 * 0.1))
    got = pixel_histogram_cross_entropy(torch.tensor(train), torch.tensor(test), 4)
    assert abs(got - expected / test.size) < 1e-12


def rows(table):
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| /")]


def test_kept_checkpoint_and_what_its_code_tells_the_decoder(tmp_path):
    full = shared_data("images", "mnist-full")
    out = tmp_path / "grid"
    proc = run_script("latent_results.py", "--out", out, "--dataset", "mnist", "--data", full, "--experiments",
                      "bitvector_vae/32", "--estimators", "gumbel", "--seeds", "1", "--nll-samples", "2",
                      "--keep-checkpoints", "--fairseq-args", "--latent-bits 8 --max-update 20 --max-valid-steps 1",
                      timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checkpoint = out / "checkpoints" / "bitvector_vae_d32" / "gumbel_seed1" / "checkpoint_last.pt"
    assert checkpoint.is_file()

    # After 20 updates every image may still get one code. Two variants whose answer is
    # known: a random encoder (many codes) with a decoder blind to its code, and the same
    # encoder with a decoder leaning on it.
    variants = {}
    for name, scale in (("blind", 0.0), ("leaning", 100.0)):
        state = torch.load(checkpoint, weights_only=False)
        generator = torch.Generator().manual_seed(0)
        for key in ("encoder.0.weight", "encoder.2.weight"):
            state["model"][key] = torch.randn(state["model"][key].shape, generator=generator)
        state["model"]["encoder.0.bias"].zero_()
        state["model"]["encoder.2.bias"].zero_()
        state["model"]["decoder.0.weight"].mul_(scale)
        variants[name] = tmp_path / f"{name}.pt"
        torch.save(state, variants[name])
    # And one whose every score is saturated: each image on the same code, as in a stalled
    # run, where a relaxed Gumbel sample has no slope left to pass back.
    state = torch.load(checkpoint, weights_only=False)
    state["model"]["encoder.2.weight"].zero_()
    state["model"]["encoder.2.bias"].fill_(1000.0)
    variants["saturated"] = tmp_path / "saturated.pt"
    torch.save(state, variants["saturated"])

    proc = run_script("bitvector_code_use.py", checkpoint, variants["blind"], variants["leaning"],
                      variants["saturated"], "--data", full, "--images", "100", "--gradient-images", "100",
                      "--out", tmp_path / "use.md")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (tmp_path / "use.md").read_text()
    trained, ignored, leaning, saturated = rows(table)
    assert trained[1:4] == ignored[1:4] == leaning[1:4] == ["gumbel", "1", "8"]
    histogram = float(table.split("test images: ")[1].split(" bits")[0])
    assert abs(float(trained[4]) - (histogram + 8 / 784)) < 1e-3  # the floor: histogram + D bits per image
    assert 0 <= float(trained[6]) <= 8 and 1 <= int(trained[7]) <= 100  # q's entropy in bits; distinct codes
    assert len(trained) == len(ignored) == len(leaning) == len(saturated) == 12
    assert int(ignored[7]) == int(leaning[7]) > 10
    assert ignored[8] == ignored[9] and leaning[8] != leaning[9]
    # Median |score| and the encoder's gradient norm: none left at saturation.
    assert int(saturated[7]) == 1 and float(saturated[10]) == 1000 and float(saturated[11]) < 1e-6
    assert float(ignored[11]) > 1e-3 and float(leaning[11]) > 1e-3


@pytest.mark.parametrize("option", ["--images", "--gradient-images"])
def test_a_count_below_one_is_named(tmp_path, option):
    checkpoint = tmp_path / "checkpoint.pt"
    checkpoint.write_bytes(b"")
    proc = run_script("bitvector_code_use.py", checkpoint, "--data", shared_data("images", "mnist-full"), option, "0")
    assert proc.returncode != 0 and f"{option} 0: must be positive" in proc.stderr
