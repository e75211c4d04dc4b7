"""Sparsity of latent codes: the Hoyer measure, as Prokhorov et al. (2021) average it.

Hoyer (2004): for z in R^d, d > 1,

    Hoyer(z) = (sqrt(d) - |z|_1 / |z|_2) / (sqrt(d) - 1),

0 for a vector with all |z_i| equal, 1 for a one-hot.  "Average Hoyer" (Prokhorov,
Li, Shareghi & Collier 2021, Sec. 4, after Mathieu et al. 2019): one code z per
sentence, each dimension divided by its standard deviation over the corpus (so
that a dimension is not "sparse" only because its scale is small), then the Hoyer
of every code, averaged.

Sparsity is meant to adapt to the sentence (each sentence its own dimensions), yet a
dimension zeroed for every sentence alike counts as sparse there too.  Two measures
tell them apart: ``active_units`` (Burda, Grosse & Salakhutdinov 2016), which
dimensions the encoder uses at all, and ``spike_pattern``, how much a spike-and-slab
code's zero pattern depends on the sentence.
"""

import math

import torch
from fairseq.logging.meters import Meter

from ..modules.probability import jensen_shannon, shannon_entropy


def hoyer(z, eps=1e-12):
    """Hoyer sparsity of each row of z (N, d)."""
    d = z.shape[-1]
    if d < 2:
        raise ValueError("the Hoyer measure needs at least two dimensions")
    ratio = z.abs().sum(-1) / z.norm(dim=-1).clamp_min(eps)
    return (math.sqrt(d) - ratio) / (math.sqrt(d) - 1)


def average_hoyer(codes):
    """Mean Hoyer of the codes (N, d) after dividing each dimension by its standard
    deviation over the N codes."""
    if codes.shape[0] < 2:
        raise ValueError("the average Hoyer needs at least two codes (it standardises each dimension)")
    codes = codes.double()
    return hoyer(codes / codes.std(0, unbiased=True).clamp_min(1e-12)).mean().item()


def active_units(means, threshold=0.01):
    """Which dimensions of the posterior means (N, d) are active (Burda, Grosse &
    Salakhutdinov 2016, Sec. 5.2): those whose mean varies over the N inputs,
    Cov_x(E_q(z|x)[z_u]) > ``threshold`` (their 0.01).  A bool mask (d,)."""
    if means.shape[0] < 2:
        raise ValueError("active units need at least two codes (a variance over the inputs)")
    return means.double().var(0, unbiased=True) > threshold


def spike_pattern(spike_prob, certain=0.01):
    """How a spike-and-slab code's zeros depend on the input, from each input's spike
    probabilities (N, d) (HSVAE: E[gamma | x], the chance that dimension i is exactly 0).

    The spike s_i of an input drawn at random is Bernoulli(pbar_i), pbar_i the mean over
    the N inputs, so its entropy is H(pbar_i) bits, of which the mutual information

        I(s_i; x) = H(pbar_i) - mean_x H(P(s_i = 1 | x))

    is what the input decides; the rest is coin-flipping the same for every input.
    Returns ``entropy_bits`` and ``information_bits`` (summed over dimensions, and per
    dimension in ``per_dimension``), and the dimensions spiked (E[gamma] > 1/2) in at
    least 1 - ``certain`` of the inputs (``always_zero``), in at most ``certain``
    (``never_zero``), and between (``switching``)."""
    spike_prob = spike_prob.double()
    spike = torch.stack([spike_prob, 1 - spike_prob], -1)  # each dimension's Bernoulli, per input
    entropy = shannon_entropy(spike.mean(0)) / math.log(2)
    information = (jensen_shannon(spike, dim=0) / math.log(2)).clamp_min(0.0)  # rounding: never below 0
    share = (spike_prob > 0.5).double().mean(0)
    always, never = int((share >= 1 - certain).sum()), int((share <= certain).sum())
    return {"always_zero": always, "never_zero": never, "switching": spike_prob.shape[1] - always - never,
            "entropy_bits": round(entropy.sum().item(), 4), "information_bits": round(information.sum().item(), 4),
            "per_dimension": {"entropy_bits": entropy.round(decimals=4).tolist(),
                              "information_bits": information.round(decimals=4).tolist()}}


class AverageHoyerMeter(Meter):
    """Collects the codes of a validation pass (``update(codes)``) and reports their
    average Hoyer: a corpus-level statistic, which per-batch averages would get wrong.
    It lives in the aggregator fairseq opens for one validation pass (``new_root``),
    so it is never checkpointed; the test of resuming a run shows that."""

    def __init__(self):
        self.codes = []

    def reset(self):
        self.codes = []

    def update(self, codes):
        self.codes.append(codes.detach().float().cpu())

    def state_dict(self):
        return {}

    def load_state_dict(self, state_dict):
        self.codes = []

    @property
    def smoothed_value(self):
        codes = torch.cat(self.codes) if self.codes else torch.zeros(0, 2)
        return round(average_hoyer(codes), 4) if len(codes) > 1 else float("nan")
