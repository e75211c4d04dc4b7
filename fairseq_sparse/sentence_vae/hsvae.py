"""``hsvae``: the hierarchical sparse VAE of Prokhorov, Li, Shareghi & Collier (2021).

Per dimension i: gamma_i ~ Beta(alpha, beta) a priori, the probability that z_i is
in the spike (exactly 0); q(gamma_i | x) = Beta(a_i(x), b_i(x)).  Given gamma, prior
and posterior on z_i are spike-and-slab with that same spike probability:
p(z_i | gamma_i) = gamma_i delta_0 + (1 - gamma_i) N(0, 1),
q(z_i | x, gamma_i) = gamma_i delta_0 + (1 - gamma_i) N(mu_i(x), sigma_i(x)^2).
The ELBO (the paper's eq. 2), weighted by psi (``--kl-weight``) and lambda
(``--gamma-kl-weight``):

    E_q [log p(x | z)] - psi E_q(gamma) KL(q(z | x, gamma) || p(z | gamma)) - lambda KL(q(gamma | x) || p(gamma)).

With equal spike weights the inner KL is exactly sum_i (1 - gamma_i) KL(N(mu_i, sigma_i^2) || N(0, 1)),
and its expectation uses E[gamma_i] = a_i / (a_i + b_i); the Beta KL is in closed
form.  z is sampled with gamma ~ q(gamma | x) (reparameterised) and the slab
indicator relaxed by a Binary Concrete of temperature ``--temperature``
(Maddison et al. 2017), z = s (mu + sigma eps).  Numerically safe: the Beta
parameters are kept in [0.5, 100] by the model (value clipped, gradient kept, as the
authors do) and gamma away from 0 and 1.

The authors' code (VictorProkhorov/HSVAE) samples otherwise, and both of its choices
are options, so that their effect can be measured:
- ``--spike-std 0.05``: the spike is a narrow Gaussian N(0, 0.05^2) rather than
  exactly 0, z = s (mu + sigma eps) + (1 - s) 0.05 eps'.  The KL over z is then
  still sum_i (1 - gamma_i) KL(N(mu_i, sigma_i^2) || N(0, 1)): with the same spike
  and weight on both sides it bounds the mixtures' KL from above (joint convexity),
  so the objective stays a lower bound (the authors estimate it from one sample);
- ``--hard-slab``: s is 0 or 1 (an exact Bernoulli(1 - gamma) draw) with the
  Binary Concrete's gradient (straight-through), so the decoder never sees a
  shrunken slab value;
- ``--kl-z-estimate sample``: the KL over z estimated from the one z the decoder
  sees, log q(z | x, gamma) - log p(z | gamma), both mixtures weighted by the
  sampled gamma (not its mean), where the default is the closed form above.
  Unbiased for the mixtures' KL only when z is a draw from q(z | x, gamma), so it needs
  both options above (a point-mass spike has no density, a relaxed indicator
  draws from another distribution).
"""

from dataclasses import dataclass, field

import torch
from fairseq.criterions import register_criterion
from fairseq.dataclass import ChoiceEnum
from torch.distributions import Beta, kl_divergence

from ..modules.probability import binary_concrete, gaussian_kl, reparameterized_sample, spike_and_slab_log_prob
from .elbo import VAEConfig, VAECriterion

GAMMA_EPS = 1e-5


@dataclass
class HSVAEConfig(VAEConfig):
    gamma_kl_weight: float = field(default=1.0, metadata={"help": "lambda: weight of KL(q(gamma|x) || p(gamma))"})
    prior_alpha: float = field(default=1.0, metadata={"help": "alpha of the Beta(alpha, beta) prior on the spike "
                                                              "probability gamma (alpha >> beta: sparser codes)"})
    prior_beta: float = field(default=1.0, metadata={"help": "beta of the Beta(alpha, beta) prior on gamma"})
    temperature: float = field(default=0.5, metadata={"help": "Binary Concrete temperature of the slab indicator"})
    spike_std: float = field(default=0.0, metadata={"help": "standard deviation of the spike: 0 puts it at exactly "
                                                            "0 (the paper); the authors' code uses 0.05"})
    hard_slab: bool = field(default=False, metadata={"help": "sample the slab indicator as 0 or 1 with the Binary "
                                                             "Concrete's straight-through gradient (the authors' "
                                                             "code) instead of relaxed"})
    kl_z_estimate: ChoiceEnum(["closed_form", "sample"]) = field(
        default="closed_form",
        metadata={"help": "KL over z: 'closed_form', sum_i (1 - E[gamma_i]) KL(slab_q || slab_p), exact for a "
                          "point-mass spike, a bound otherwise; 'sample', log q(z|x,gamma) - log p(z|gamma) at the "
                          "sampled z and gamma (the authors' code; needs --spike-std > 0 and --hard-slab)"})


@register_criterion("hsvae", dataclass=HSVAEConfig)
class HSVAECriterion(VAECriterion):
    def __init__(self, cfg, task):
        super().__init__(cfg, task)
        if cfg.prior_alpha <= 0 or cfg.prior_beta <= 0 or cfg.temperature <= 0:
            raise ValueError("--prior-alpha, --prior-beta and --temperature must be positive")
        if not cfg.spike_std >= 0:  # also refuses NaN
            raise ValueError(f"--spike-std {cfg.spike_std}: must be 0 or positive")
        if cfg.kl_z_estimate == "sample" and not (cfg.spike_std > 0 and cfg.hard_slab):
            raise ValueError("--kl-z-estimate sample needs --spike-std > 0 and --hard-slab: only then is z a draw "
                             "from the spike-and-slab q(z | x, gamma), whose density the estimate takes")

    def latent(self, posterior):
        mean, log_var = posterior["mean"], posterior["log_var"]
        q_gamma = Beta(posterior["gamma_a"], posterior["gamma_b"])
        gamma = q_gamma.rsample().clamp(GAMMA_EPS, 1 - GAMMA_EPS)
        # The slab indicator ~ Bernoulli(1 - gamma), relaxed; its logit is log((1 - gamma) / gamma).
        slab_on = binary_concrete(torch.log1p(-gamma) - torch.log(gamma), self.cfg.temperature,
                                  hard=self.cfg.hard_slab)
        z = slab_on * reparameterized_sample(mean, log_var)
        if self.cfg.spike_std > 0:
            z = z + (1 - slab_on) * self.cfg.spike_std * torch.randn_like(z)
        expected_gamma = q_gamma.mean
        if self.cfg.kl_z_estimate == "sample":
            kl_z = (spike_and_slab_log_prob(z, gamma, self.cfg.spike_std, mean, log_var)
                    - spike_and_slab_log_prob(z, gamma, self.cfg.spike_std)).sum(-1)
        else:
            kl_z = gaussian_kl(mean, log_var, weight=1 - expected_gamma)
        prior = Beta(torch.full_like(mean, self.cfg.prior_alpha), torch.full_like(mean, self.cfg.prior_beta))
        kl_gamma = kl_divergence(q_gamma, prior).sum(-1)
        terms = self.cfg.kl_weight * kl_z + self.cfg.gamma_kl_weight * kl_gamma
        # Logged apart: KL(q(gamma|x) || p(gamma)) is paid even by codes that say nothing about x.
        return z, terms, {"kl_z": kl_z, "kl_gamma": kl_gamma}, (1 - expected_gamma) * mean
