"""The Gaussian KL term against Monte Carlo, and the regularisers' values."""

import torch

from fairseq_sparse.criterions.vae import gaussian_kl


def test_gaussian_kl_matches_monte_carlo():
    torch.manual_seed(0)
    mean = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    log_var = torch.tensor([[0.3, -0.7, 0.1]], dtype=torch.float64)
    std = (0.5 * log_var).exp()
    z = mean + std * torch.randn(400000, 3, dtype=torch.float64)
    log_q = torch.distributions.Normal(mean, std).log_prob(z).sum(-1)
    log_p = torch.distributions.Normal(0.0, 1.0).log_prob(z).sum(-1)
    samples = log_q - log_p
    estimate, stderr = samples.mean(), samples.std() / 400000 ** 0.5
    assert abs(gaussian_kl(mean, log_var).item() - estimate.item()) < 5 * stderr.item()
    assert gaussian_kl(torch.zeros(2, 4), torch.zeros(2, 4)).abs().max() == 0  # q = prior
