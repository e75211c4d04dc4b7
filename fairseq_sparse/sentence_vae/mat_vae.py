"""``mat_vae``: the sparse VAE of Mathieu, Rainforth, Siddharth & Teh (ICML 2019, Sec. 5),
a baseline of Prokhorov et al. (2021).

Prior: spike-and-slab per dimension, p(z_d) = (1 - w) N(0, 1) + w N(0, s^2), a
narrow "spike" Gaussian (w = ``--prior-spike-weight``, s = ``--prior-spike-std``).
Objective, per sentence, z ~ q(z | x) Gaussian:

    -log p(x | z) + psi * [log q(z | x) - log p(z)] + lambda * MMD(q(z), p(z)),

the KL by its one-sample estimate (no closed form with a mixture prior), the MMD
between the batch's codes and as many prior samples, with inverse-multiquadric
kernels k(x, y) = C / (C + |x - y|^2) summed over C = 2 d {0.1, 0.2, 0.5, 1, 2, 5, 10}
(the unbiased estimator; it is a batch quantity, charged once per sentence).
psi is ``--kl-weight``, lambda ``--mmd-weight``.
"""

from dataclasses import dataclass, field

import torch
from fairseq.criterions import register_criterion

from ..modules.probability import reparameterized_sample, spike_and_slab_log_prob
from .elbo import VAEConfig, VAECriterion

KERNEL_SCALES = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass
class MATVAEConfig(VAEConfig):
    mmd_weight: float = field(default=1.0, metadata={"help": "lambda: weight of MMD(aggregate posterior, prior)"})
    prior_spike_weight: float = field(default=0.8, metadata={"help": "w: mass of the narrow spike Gaussian"})
    prior_spike_std: float = field(default=0.05, metadata={"help": "s: standard deviation of the spike Gaussian"})


def sample_spike_and_slab(n, dim, weight, spike_std, like):
    spike = torch.rand(n, dim, device=like.device, dtype=like.dtype) < weight
    return torch.randn(n, dim, device=like.device, dtype=like.dtype) * torch.where(
        spike, torch.full_like(like[:1].expand(n, dim), spike_std), torch.ones_like(like[:1].expand(n, dim)))


def imq_mmd(x, y):
    """Unbiased MMD^2 between samples x (n, d) and y (m, d), inverse-multiquadric kernels."""
    n, m, d = len(x), len(y), x.shape[1]
    if n < 2 or m < 2:
        return x.new_zeros(())

    def kernel(a, b):
        distances = torch.cdist(a, b).pow(2)
        return sum(2 * d * s / (2 * d * s + distances) for s in KERNEL_SCALES)

    kxx, kyy, kxy = kernel(x, x), kernel(y, y), kernel(x, y)
    off = 1 - torch.eye(n, device=x.device, dtype=x.dtype)
    off_y = 1 - torch.eye(m, device=x.device, dtype=x.dtype)
    return (kxx * off).sum() / (n * (n - 1)) + (kyy * off_y).sum() / (m * (m - 1)) - 2 * kxy.mean()


@register_criterion("mat_vae", dataclass=MATVAEConfig)
class MATVAECriterion(VAECriterion):
    def __init__(self, cfg, task):
        super().__init__(cfg, task)
        if not 0 < cfg.prior_spike_weight < 1 or cfg.prior_spike_std <= 0:
            raise ValueError("--prior-spike-weight must lie in (0, 1) and --prior-spike-std be positive")

    def latent(self, posterior):
        mean, log_var = posterior["mean"], posterior["log_var"]
        z = reparameterized_sample(mean, log_var)
        log_q = torch.distributions.Normal(mean, (0.5 * log_var).exp()).log_prob(z).sum(-1)
        kl = log_q - spike_and_slab_log_prob(z, self.cfg.prior_spike_weight, self.cfg.prior_spike_std).sum(-1)
        prior = sample_spike_and_slab(len(z), z.shape[1], self.cfg.prior_spike_weight, self.cfg.prior_spike_std, z)
        mmd = imq_mmd(z, prior)
        return z, self.cfg.kl_weight * kl + self.cfg.mmd_weight * mmd, {"kl": kl}, mean
