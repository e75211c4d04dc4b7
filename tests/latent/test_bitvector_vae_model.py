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


def test_code_statistics_split_the_scores_and_measure_how_alike_the_images_gradients_are():
    model = BitVectorVAEModel(pixels=4, levels=3, bits=2, hidden_dim=3, output_rank=2)  # training mode
    scores = torch.tensor([[1.0, -2.0], [3.0, -2.0], [2.0, 4.0]], requires_grad=True)
    stats = model.code_statistics(scores, torch.zeros(3))
    # Per bit over the 3 images: means 2 and 0, population standard deviations sqrt(2/3) and sqrt(8).
    assert stats["score_shared"].item() == pytest.approx(3 * (2 + 0) / 2)
    assert stats["score_spread"].item() == pytest.approx(3 * (math.sqrt(2 / 3) + math.sqrt(8)) / 2)
    assert stats["score_abs"].item() == pytest.approx(1.5 + 2.5 + 3)
    assert stats["positive_bits"].item() == 1 + 1 + 2
    assert stats["gradient_batches"] == 1 and stats["gradient_alignment"].item() == 0  # filled in by backward
    push = torch.tensor([[1.0, -3.0], [2.0, 0.5], [0.0, 1.0]])
    (scores * push).sum().backward()
    mean = push.mean(0)
    expected = (mean @ mean) / (push.square().sum(1).mean())
    assert stats["gradient_alignment"].item() == pytest.approx(expected.item())
    for grad, alignment in ((torch.tensor([[1.0, 2.0]] * 3), 1.0),  # every image pushed the same way
                            (torch.tensor([[1.0, 2.0], [-1.0, -2.0], [0.0, 0.0]]), 0.0),  # pushes that cancel
                            (torch.zeros(3, 2), 0.0)):  # no gradient at all (a collapsed code): 0, not NaN
        scores = torch.randn(3, 2, requires_grad=True)
        stats = model.code_statistics(scores, torch.zeros(3))
        (scores * grad).sum().backward()
        assert stats["gradient_alignment"].item() == pytest.approx(alignment)
    model.eval()
    assert "gradient_alignment" not in model.code_statistics(torch.randn(3, 2, requires_grad=True), torch.zeros(3))


def test_centered_encoder_input_is_zero_mean_over_training_images_and_kept_in_the_checkpoint():
    from argparse import Namespace

    from fairseq_sparse.latent.bitvector_vae_task import BitVectorVAEConfig, BitVectorVAETask

    task = BitVectorVAETask(BitVectorVAEConfig(dataset="digits", latent_bits=3))
    cfg = Namespace(hidden_dim=4, output_rank=2, nll_samples=0, encoder_input="centered", encoder_delay=0)
    model = BitVectorVAEModel.build_model(cfg, task)
    train = model.intensities(task.levels[task.parts["train"]])
    torch.testing.assert_close((train - model.input_mean).mean(0), torch.zeros(64), atol=1e-6, rtol=0)
    assert 0.2 < train.sum(1).mean() / 64 and model.input_mean.max() > 0.5  # what centring takes away
    levels = task.levels[:5]
    torch.testing.assert_close(model(levels), model.encoder(model.intensities(levels) - model.input_mean))
    assert torch.equal(model.state_dict()["input_mean"], model.input_mean)
    cfg.encoder_input = "intensities"
    plain = BitVectorVAEModel.build_model(cfg, task)
    assert "input_mean" not in plain.state_dict()
    torch.testing.assert_close(plain(levels), plain.encoder(plain.intensities(levels)))


def test_encoder_delay_holds_the_encoder_and_only_the_encoder_for_its_updates():
    from argparse import Namespace

    from fairseq_sparse.latent.bitvector_vae_task import BitVectorVAEConfig, BitVectorVAETask

    task = BitVectorVAETask(BitVectorVAEConfig(dataset="digits", latent_bits=3))
    cfg = Namespace(hidden_dim=4, output_rank=2, nll_samples=0, encoder_input="intensities", encoder_delay=2)
    model = BitVectorVAEModel.build_model(cfg, task)
    sample = {"net_input": {"images": task.levels[:8]}}
    estimator = build_estimator("sparsemap", space=BitVector(3))
    for updates, encoder_learns in ((0, False), (1, False), (2, True), (5, True)):
        model.zero_grad(set_to_none=True)
        model.set_num_updates(updates)
        loss, stats = model.latent_loss(sample, estimator)
        loss.backward()
        assert (model.encoder[0].weight.grad is not None) == encoder_learns, updates
        assert model.decoder[0].weight.grad.abs().sum() > 0  # the decoder always learns
        assert ("gradient_alignment" in stats) == encoder_learns
    cfg.encoder_delay = -1
    with pytest.raises(ValueError, match="--encoder-delay -1: a number of updates"):
        BitVectorVAEModel.build_model(cfg, task)
