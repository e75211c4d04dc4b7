"""Label-smoothed entmax losses against the entmax package and gradcheck."""

import entmax as reference_package
import pytest
import torch

from fairseq_sparse.entmax.losses import entmax_loss

REFERENCE = {2.0: reference_package.SparsemaxLoss, 1.5: reference_package.Entmax15Loss}


@pytest.mark.parametrize("alpha", [1.5, 2.0])
def test_matches_the_entmax_package_without_smoothing(alpha):
    torch.manual_seed(0)
    z = torch.randn(20, 11, dtype=torch.float64) * 3
    y = torch.randint(0, 11, (20,))
    want = REFERENCE[alpha](reduction="none")(z, y)
    torch.testing.assert_close(entmax_loss(z, y, alpha), want)


@pytest.mark.parametrize("alpha", [1.5, 2.0])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradcheck(alpha, eps):
    torch.manual_seed(1)
    z = torch.randn(6, 7, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 7, (6,))
    assert torch.autograd.gradcheck(lambda t: entmax_loss(t, y, alpha, eps), (z,))


@pytest.mark.parametrize("alpha", [1.5, 2.0])
def test_zero_exactly_at_the_smoothed_target_and_positive_elsewhere(alpha):
    torch.manual_seed(2)
    z = torch.randn(30, 9, dtype=torch.float64)
    y = torch.randint(0, 9, (30,))
    assert bool((entmax_loss(z, y, alpha, 0.1) > 0).all())
    # Scores whose entmax is the smoothed target q: z = q^(alpha-1)/(alpha-1) (plus any constant).
    q = torch.full((30, 9), 0.1 / 9, dtype=torch.float64)
    q[torch.arange(30), y] += 0.9
    z_star = q.pow(alpha - 1) / (alpha - 1) + 5.0
    torch.testing.assert_close(entmax_loss(z_star, y, alpha, 0.1), torch.zeros(30, dtype=torch.float64), atol=1e-9, rtol=0)


def test_bad_arguments():
    z, y = torch.randn(2, 3), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="alpha"):
        entmax_loss(z, y, 1.2)
    with pytest.raises(ValueError, match="smoothing"):
        entmax_loss(z, y, 2.0, 1.0)


def test_support_returned_with_the_loss():
    z = torch.tensor([[3.0, 1.0, -2.0], [0.0, 0.0, 0.0]])
    loss, support = entmax_loss(z, torch.tensor([0, 1]), 2.0, return_support=True)
    assert support.tolist() == [1, 3] and not support.requires_grad
