"""The shared probability helpers against torch.distributions, exact frequencies and
hand-computed cases."""

import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from fairseq_sparse.modules.probability import (binary_concrete, gaussian_kl, gumbel_noise, jensen_shannon,
                                                reparameterized_sample, shannon_entropy)


def test_gaussian_kl_is_torch_s_closed_form_weighted_per_dimension():
    torch.manual_seed(0)
    mean, log_var, weight = torch.randn(5, 7, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64), \
        torch.rand(5, 7, dtype=torch.float64)
    per_dim = kl_divergence(Normal(mean, (0.5 * log_var).exp()), Normal(0.0, 1.0))
    torch.testing.assert_close(gaussian_kl(mean, log_var), per_dim.sum(-1))
    torch.testing.assert_close(gaussian_kl(mean, log_var, weight=weight), (weight * per_dim).sum(-1))


def test_reparameterized_sample_has_the_moments_and_gradients_of_the_gaussian():
    torch.manual_seed(0)
    mean = torch.tensor([1.5, -2.0], requires_grad=True)
    log_var = torch.tensor([0.0, -1.0], requires_grad=True)
    z = reparameterized_sample(mean.expand(200_000, 2), log_var.expand(200_000, 2))
    torch.testing.assert_close(z.mean(0), mean.detach(), atol=0.01, rtol=0)
    torch.testing.assert_close(z.var(0), log_var.detach().exp(), atol=0.01, rtol=0)
    z.mean(0).sum().backward()
    torch.testing.assert_close(mean.grad, torch.ones(2))  # d E[z] / d mean = 1, d E[z] / d log_var = 0
    torch.testing.assert_close(log_var.grad, torch.zeros(2), atol=0.01, rtol=0)


def test_gumbel_max_samples_the_softmax():
    torch.manual_seed(0)
    logits = torch.tensor([1.0, 0.0, -1.0, 2.0])
    draws = (logits + gumbel_noise(logits.expand(200_000, 4))).argmax(-1)
    frequencies = torch.bincount(draws, minlength=4) / len(draws)
    torch.testing.assert_close(frequencies, torch.softmax(logits, -1), atol=0.005, rtol=0)
    assert torch.isfinite(gumbel_noise(torch.zeros(1000))).all()


def test_binary_concrete_is_a_relaxed_bernoulli_of_the_sigmoid():
    torch.manual_seed(0)
    logits = torch.tensor([-1.0, 0.5, 3.0])
    soft = binary_concrete(logits.expand(200_000, 3), temperature=0.5)
    assert ((soft >= 0) & (soft <= 1)).all()
    # At any temperature P(relaxed sample > 1/2) = sigmoid(logits) (Maddison et al. 2017).
    torch.testing.assert_close((soft > 0.5).float().mean(0), torch.sigmoid(logits), atol=0.005, rtol=0)


def test_hard_binary_concrete_is_an_exact_bernoulli_with_the_relaxed_gradient():
    logits = torch.tensor([-1.0, 0.5, 3.0])
    torch.manual_seed(0)
    hard = binary_concrete(logits.expand(200_000, 3), temperature=0.5, hard=True)
    assert set(hard.unique().tolist()) == {0.0, 1.0}
    torch.testing.assert_close(hard.mean(0), torch.sigmoid(logits), atol=0.005, rtol=0)
    grads = []
    for hard in (False, True):
        x = logits.clone().requires_grad_()
        torch.manual_seed(1)
        (binary_concrete(x.expand(1000, 3), temperature=0.5, hard=hard) * torch.arange(1.0, 4.0)).sum().backward()
        grads.append(x.grad)
    assert grads[0].abs().min() > 0
    torch.testing.assert_close(grads[1], grads[0])  # straight-through: the relaxed sample's gradient


def test_clamp_keep_gradient_clips_the_value_and_passes_the_gradient():
    from fairseq_sparse.modules.probability import clamp_keep_gradient

    x = torch.tensor([0.1, 0.5, 3.0, 250.0], requires_grad=True)
    y = clamp_keep_gradient(x, 0.5, 100.0)
    assert y.tolist() == [0.5, 0.5, 3.0, 100.0]
    (y * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 2.0, 3.0, 4.0]  # a plain clamp gives 0 at 0.1 and 250


def test_shannon_entropy_and_jensen_shannon_against_hand_computed_cases():
    """Uniform over 4: log 4 nats, a point mass 0 (0 log 0 = 0); the divergence of equal
    distributions is 0, of disjoint ones log n, and of two Bernoullis it is the mutual
    information H(mean) - mean H."""
    assert shannon_entropy(torch.full((4,), 0.25)).item() == pytest.approx(math.log(4))
    assert shannon_entropy(torch.tensor([1.0, 0.0, 0.0])).item() == 0.0
    same = torch.tensor([0.2, 0.3, 0.5]).repeat(5, 1)
    assert jensen_shannon(same).item() == pytest.approx(0.0, abs=1e-7)
    assert jensen_shannon(torch.eye(3)).item() == pytest.approx(math.log(3))

    def h(q):
        return -(q * math.log(q) + (1 - q) * math.log(1 - q))

    bernoullis = torch.tensor([[0.2, 0.8], [0.6, 0.4]], dtype=torch.float64)
    assert jensen_shannon(bernoullis).item() == pytest.approx(h(0.4) - (h(0.2) + h(0.6)) / 2)
