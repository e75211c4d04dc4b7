"""The Hoyer measure against hand-computed vectors, the corpus-level average, the
active units and the spike pattern's information."""

import math

import numpy as np
import pytest
import torch

from fairseq_sparse.sentence_vae.hoyer import AverageHoyerMeter, active_units, average_hoyer, hoyer, spike_pattern


def test_hoyer_of_hand_computed_vectors():
    z = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-2.0, 2.0, 2.0, -2.0], [0.0, 0.0, 3.0, 0.0], [3.0, 4.0, 0.0, 0.0]])
    # all-equal magnitudes: 0; one-hot: 1; (3, 4, 0, 0): |z|_1/|z|_2 = 7/5, (2 - 1.4) / (2 - 1) = 0.6
    torch.testing.assert_close(hoyer(z), torch.tensor([0.0, 0.0, 1.0, 0.6]))
    with pytest.raises(ValueError, match="at least two dimensions"):
        hoyer(torch.ones(3, 1))


def test_average_hoyer_standardises_each_dimension():
    """Scaling one dimension changes the Hoyer of raw codes, not the average Hoyer."""
    torch.manual_seed(0)
    codes = torch.randn(500, 8)
    scaled = codes * torch.tensor([100.0, 1, 1, 1, 1, 1, 1, 0.01])
    assert average_hoyer(scaled) == pytest.approx(average_hoyer(codes), abs=1e-6)
    assert abs(hoyer(scaled).mean().item() - hoyer(codes).mean().item()) > 0.3
    # Codes with one active dimension each are maximally sparse after standardising too.
    one_hot = torch.eye(8).repeat(50, 1) * torch.rand(400, 1).add(0.5)
    assert average_hoyer(one_hot) == pytest.approx(1.0)
    # Against the definition written out with numpy, row by row.
    rows = codes.numpy() / codes.numpy().std(0, ddof=1)
    by_hand = [(math.sqrt(8) - np.abs(r).sum() / np.sqrt((r ** 2).sum())) / (math.sqrt(8) - 1) for r in rows]
    assert average_hoyer(codes) == pytest.approx(float(np.mean(by_hand)))


def test_meter_is_corpus_level():
    torch.manual_seed(1)
    codes = torch.randn(300, 6) * torch.arange(1, 7)
    meter = AverageHoyerMeter()
    for chunk in codes.split(7):  # batches of 7: per-batch averages would differ
        meter.update(chunk)
    assert meter.smoothed_value == pytest.approx(round(average_hoyer(codes), 4))
    assert meter.state_dict() == {}


def test_active_units_are_the_dimensions_that_vary_over_the_inputs():
    """Burda et al.'s count: a dimension constant over the inputs (zero, or any value) is
    inactive, one whose variance crosses the threshold is active, at either scale."""
    torch.manual_seed(2)
    means = torch.zeros(1000, 5)
    means[:, 1] = 3.0  # constant, not zero: still tells no input from another
    means[:, 2] = torch.randn(1000) * 0.2  # variance 0.04 > 0.01
    means[:, 3] = torch.randn(1000) * 0.05  # variance 0.0025 < 0.01
    means[:, 4] = torch.randn(1000) * 100
    assert active_units(means).tolist() == [False, False, True, False, True]
    assert active_units(means, threshold=1e-3).tolist() == [False, False, True, True, True]
    with pytest.raises(ValueError, match="at least two codes"):
        active_units(torch.ones(1, 3))


def test_spike_pattern_information_against_hand_computed_cases():
    """Dimension 0 spiked with probability 0.9 for every input: 0.469 bits of entropy, none
    of it the input's.  Dimension 1 certainly spiked for half the inputs and certainly not
    for the other half: 1 bit, all the input's.  Dimension 2 never spiked, dimension 3
    always: no entropy.  Dimension 4: P = 0.2 or 0.6 by input, so pbar = 0.4 and
    I = H(0.4) - (H(0.2) + H(0.6)) / 2."""
    def h(p):
        return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))

    n = 1000
    prob = torch.zeros(n, 5)
    prob[:, 0] = 0.9
    prob[: n // 2, 1] = 1.0
    prob[:, 3] = 1.0
    prob[:, 4] = torch.tensor([0.2, 0.6]).repeat(n // 2)
    pattern = spike_pattern(prob)
    assert pattern["entropy_bits"] == pytest.approx(h(0.9) + 1 + h(0.4), abs=1e-4)
    assert pattern["information_bits"] == pytest.approx(1 + h(0.4) - (h(0.2) + h(0.6)) / 2, abs=1e-4)
    assert pattern["per_dimension"]["entropy_bits"] == pytest.approx([h(0.9), 1, 0, 0, h(0.4)], abs=1e-4)
    assert pattern["per_dimension"]["information_bits"] == pytest.approx(
        [0, 1, 0, 0, h(0.4) - (h(0.2) + h(0.6)) / 2], abs=1e-4)
    # Spiked (P > 1/2) for every input: 0 and 3; for none: 2; switching: 1 and 4.
    assert (pattern["always_zero"], pattern["never_zero"], pattern["switching"]) == (2, 1, 2)
