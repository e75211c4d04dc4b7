"""The bit-vector VAE's bounds against exact log-likelihoods by enumerating all 2^D codes."""

import itertools
import math

import pytest
import torch

from fairseq_sparse.latent import BitVector, build_estimator
from fairseq_sparse.latent.bitvector_vae_model import BitVectorVAEModel


def exact_log_likelihood(model, levels):
    """log p(x) = log sum_z p(x | z) 2^-D over every z."""
    every = torch.tensor(list(itertools.product([0.0, 1.0], repeat=model.bits)))
    rows = []
    for x in levels:
        nll = model.reconstruction(x[None].expand(len(every), -1), every)
        rows.append(torch.logsumexp(-nll, 0) - model.bits * math.log(2))
    return torch.stack(rows)


@pytest.mark.parametrize("estimator", ["sparsemap", "topk_sparsemax", "sfe"])
def test_elbo_and_importance_sampled_nll_bracket_the_exact_likelihood(estimator):
    torch.manual_seed(0)
    model = BitVectorVAEModel(pixels=10, levels=5, bits=5, hidden_dim=16, output_rank=3, nll_samples=4000).eval()
    levels = torch.randint(0, 5, (6, 10))
    est = build_estimator(estimator, space=BitVector(5), **({"topk": 6} if estimator == "topk_sparsemax" else {}))
    est.eval()
    with torch.no_grad():
        exact = exact_log_likelihood(model, levels)
        loss, stats = model.latent_loss({"net_input": {"images": levels}}, est)
    assert stats["dims"] == 60 and stats["estimated"] == 6
    # The IS estimate is consistent: with many samples it is the exact log-likelihood.
    torch.testing.assert_close(-stats["nll"], exact.sum(), atol=0.05 * 6, rtol=0)
    # The negative ELBO bounds -log p(x) from above (exactly computed for marginalisation).
    if estimator != "sfe":
        assert stats["neg_elbo"] >= -exact.sum() - 1e-6
        torch.testing.assert_close(loss, stats["neg_elbo"])


def test_reconstruction_is_each_pixels_categorical_negative_log_likelihood():
    """-log p(x | z) = -sum over pixels of log softmax(logits of the pixel)[its level], the
    per-pixel logits read from the decoder's low-rank output as (pixels, rank) rows."""
    torch.manual_seed(0)
    model = BitVectorVAEModel(pixels=7, levels=4, bits=3, hidden_dim=8, output_rank=2)
    z = torch.rand(5, 3)
    levels = torch.randint(0, 4, (5, 7))
    hidden = model.decoder(z).view(5, 7, 2)
    expected = torch.stack([-sum(torch.log_softmax(model.output(hidden[n, i]), -1)[levels[n, i]] for i in range(7))
                            for n in range(5)])
    torch.testing.assert_close(model.reconstruction(levels, z), expected)
