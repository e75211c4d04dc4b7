"""The Hoyer measure against hand-computed vectors, and the corpus-level average."""

import math

import numpy as np
import pytest
import torch

from fairseq_sparse.vae.hoyer import AverageHoyerMeter, average_hoyer, hoyer


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
