"""Probability helpers shared by the research lines, once.

- :func:`gaussian_kl`: KL(N(mean, exp(log_var)) || N(0, I)) in closed form;
- :func:`reparameterized_sample`: z = mean + sigma * eps (Kingma & Welling 2014);
- :func:`gumbel_noise`: g = -log(-log u), for Gumbel-max and Gumbel-softmax
  (Jang, Gu & Poole 2017; Maddison, Mnih & Teh 2017) and Gumbel-top-k;
- :func:`binary_concrete`: a relaxed Bernoulli sample (Maddison et al. 2017);
- :func:`spike_and_slab_log_prob`: the log density of a spike-and-slab mixture with a
  Gaussian spike (MAT-VAE's prior; HSVAE's prior and posterior given gamma);
- :func:`clamp_keep_gradient`: a clamp whose gradient is the identity's;
- :func:`shannon_entropy` and :func:`jensen_shannon`: the entropy of distributions
  and the generalised Jensen-Shannon divergence among them (the attention report's
  head diversity, the sentence VAEs' spike-pattern information).

Uniform draws are kept off 0 and 1, where the logarithms are infinite.
"""

import math

import torch

# Uniform draws are clamped to [UNIFORM_TAIL, 1 - UNIFORM_TAIL] for the logistic noise
# (both tails take a logarithm) and to [GUMBEL_TAIL, 1] for Gumbel noise (torch.rand
# never returns 1, and -log(-log u) only needs u > 0).
UNIFORM_TAIL = 1e-6
GUMBEL_TAIL = 1e-20


def gaussian_kl(mean, log_var, weight=None):
    """KL(N(mean, exp(log_var)) || N(0, I)) per row, in closed form:
    0.5 sum_i (mean_i^2 + exp(log_var_i) - 1 - log_var_i), each dimension's term
    multiplied by ``weight`` (same shape) when given."""
    terms = mean.pow(2) + log_var.exp() - 1 - log_var
    if weight is not None:
        terms = weight * terms
    return 0.5 * terms.sum(-1)


def reparameterized_sample(mean, log_var):
    """z ~ N(mean, exp(log_var)) as mean + exp(log_var / 2) * eps, eps ~ N(0, I):
    differentiable in both parameters."""
    return mean + torch.randn_like(mean) * (0.5 * log_var).exp()


def gumbel_noise(like):
    """Standard Gumbel noise of ``like``'s shape, dtype and device: -log(-log u)."""
    uniform = torch.rand_like(like).clamp(GUMBEL_TAIL, 1.0)
    return -torch.log((-torch.log(uniform)).clamp_min(GUMBEL_TAIL))


def binary_concrete(logits, temperature, hard=False):
    """A relaxed Bernoulli(sigmoid(logits)) sample: sigmoid((logits + L) / temperature),
    L = log u - log(1 - u) logistic noise (Maddison et al. 2017).

    ``hard``: the sample rounded to 0 or 1 in value, with the relaxed sample's gradient
    (straight-through).  Rounding at 1/2 is an exact Bernoulli(sigmoid(logits)) draw at
    any temperature, since sigmoid((logits + L) / t) > 1/2 iff logits + L > 0."""
    uniform = torch.rand_like(logits).clamp(UNIFORM_TAIL, 1 - UNIFORM_TAIL)
    soft = torch.sigmoid((logits + torch.log(uniform) - torch.log1p(-uniform)) / temperature)
    if not hard:
        return soft
    return soft + ((soft > 0.5).to(soft) - soft).detach()


def spike_and_slab_log_prob(z, spike_weight, spike_std, mean=None, log_var=None):
    """Per dimension, log [w N(z; 0, s^2) + (1 - w) N(z; mean, exp(log_var))], with
    w = ``spike_weight`` (a float or a tensor broadcasting with z) and s = ``spike_std``;
    the slab is N(0, 1) when ``mean`` is not given."""
    weight = torch.as_tensor(spike_weight, dtype=z.dtype, device=z.device)
    log_normal = -0.5 * math.log(2 * math.pi)
    spike = log_normal - math.log(spike_std) - 0.5 * (z / spike_std).pow(2) + torch.log(weight)
    if mean is None:
        slab = log_normal - 0.5 * z.pow(2)
    else:
        slab = log_normal - 0.5 * log_var - 0.5 * (z - mean).pow(2) * torch.exp(-log_var)
    return torch.logaddexp(spike, slab + torch.log1p(-weight))


def clamp_keep_gradient(x, low, high):
    """``x`` clamped to [low, high] in value, with the gradient of the identity.

    A plain clamp has zero gradient outside the range, so a parameter pushed past a
    bound stays there; this one lets the loss pull it back (what the HSVAE authors
    do for the Beta posterior's parameters: TensorFlow Probability's
    ``clip_by_value_preserve_gradient``)."""
    return x + (x.clamp(low, high) - x).detach()


def shannon_entropy(p, dim=-1):
    """Shannon entropy in nats of the distributions ``p`` along ``dim`` (0 log 0 = 0)."""
    return -(p * torch.log(p.clamp_min(1e-30))).sum(dim)


def jensen_shannon(p, dim=0):
    """Generalised Jensen-Shannon divergence (nats) among the distributions of ``p`` (along
    its last axis) indexed by ``dim``, with equal weights:

        JS(p_1, ..., p_n) = H(mean_i p_i) - mean_i H(p_i),

    0 when they are all alike, log n when their supports are disjoint.  With i the input
    x drawn uniformly, it is the mutual information I(x; y) of y ~ p_x."""
    return shannon_entropy(p.mean(dim)) - shannon_entropy(p).mean(dim)
