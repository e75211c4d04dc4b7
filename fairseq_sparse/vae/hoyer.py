"""Sparsity of latent codes: the Hoyer measure, as Prokhorov et al. (2021) average it.

Hoyer (2004): for z in R^d, d > 1,

    Hoyer(z) = (sqrt(d) - |z|_1 / |z|_2) / (sqrt(d) - 1),

0 for a vector with all |z_i| equal, 1 for a one-hot.  "Average Hoyer" (Prokhorov,
Li, Shareghi & Collier 2021, Sec. 4, after Mathieu et al. 2019): one code z per
sentence, each dimension divided by its standard deviation over the corpus (so
that a dimension is not "sparse" only because its scale is small), then the Hoyer
of every code, averaged.
"""

import math

import torch
from fairseq.logging.meters import Meter


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
