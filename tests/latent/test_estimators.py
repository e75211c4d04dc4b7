"""The latent-variable estimators against exact expectations computed by enumeration."""

import math

import pytest
import torch

from fairseq_sparse.entmax import sparsemax
import itertools

from fairseq_sparse.latent import (ESTIMATORS, BitVector, build_estimator, topk_sparsemax,
                                   unordered_set_probability)

K = 5


def decoder(weights):
    """loss(b, z) = (x_b . W z)^2 style toy decoder: depends on the latent and on parameters."""
    def loss_fn(rows, z):
        return ((z @ weights) * (rows.to(z.dtype) + 1)).pow(2)
    return loss_fn


def brute_force(probs, weights):
    """sum_z probs[b, z] loss(b, z), enumerating every z."""
    B = probs.shape[0]
    eye = torch.eye(K, dtype=probs.dtype)
    losses = torch.stack([decoder(weights)(torch.arange(B), eye[z].expand(B, K)) for z in range(K)], 1)
    return (probs * losses).sum(1)


@pytest.mark.parametrize("name,normalizer", [("dense", lambda s: torch.softmax(s, -1)), ("sparsemax", sparsemax)])
def test_marginalisation_is_exact_in_value_and_gradient(name, normalizer):
    torch.manual_seed(0)
    scores = (torch.randn(4, K, dtype=torch.float64) * 2).requires_grad_()
    weights = torch.randn(K, dtype=torch.float64, requires_grad=True)
    est = build_estimator(name)(scores, decoder(weights))
    exact = brute_force(normalizer(scores), weights)
    torch.testing.assert_close(est.loss, exact)
    got = torch.autograd.grad(est.surrogate.sum(), (scores, weights))
    want = torch.autograd.grad(exact.sum(), (scores, weights))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    support = (normalizer(scores) > 0).sum(1).to(torch.float64)
    torch.testing.assert_close(est.decoder_calls, support if name == "sparsemax" else torch.full((4,), float(K),
                                                                                             dtype=torch.float64))


def test_dense_on_a_peaked_softmax_decodes_every_z_and_leaves_no_denormal_gradient():
    """Softmax probabilities of exp(-100) are denormal in float32; as weights they made the
    decoder's backward products denormal too (6x slower on CPU).  Dense weighs them 0, still
    decodes all K, and its expectation is the enumerated one to float32 precision."""
    scores = torch.tensor([[0.0, -2.0, -100.0, -150.0, -300.0]], requires_grad=True)
    weights = torch.randn(K, requires_grad=True)
    est = build_estimator("dense")(scores, decoder(weights))
    assert est.decoder_calls.item() == K
    torch.testing.assert_close(est.loss, brute_force(torch.softmax(scores, -1), weights))
    for grad in torch.autograd.grad(est.surrogate.sum(), (scores, weights)):
        nonzero = grad[grad != 0].abs()
        assert bool((nonzero >= torch.finfo(torch.float32).tiny).all()), grad
        assert grad[0, 2:].abs().sum() == 0 if grad.dim() == 2 else grad[2:].abs().sum() == 0


def test_sparse_equals_dense_marginalisation_with_full_support():
    """Where sparsemax keeps every z, decoding its support is decoding every z."""
    scores = torch.tensor([[0.30, 0.25, 0.20, 0.28, 0.22]], dtype=torch.float64, requires_grad=True)
    weights = torch.randn(K, dtype=torch.float64, requires_grad=True)
    assert bool((sparsemax(scores) > 0).all())
    est = build_estimator("sparsemax")(scores, decoder(weights))
    assert est.decoder_calls.item() == K
    exact = brute_force(sparsemax(scores), weights)
    torch.testing.assert_close(est.loss, exact)
    for g, w in zip(torch.autograd.grad(est.surrogate.sum(), (scores, weights)),
                    torch.autograd.grad(exact.sum(), (scores, weights))):
        torch.testing.assert_close(g, w)


def test_topk_sparsemax_equals_sparsemax_whenever_certified():
    torch.manual_seed(1)
    scores = torch.randn(2000, 12, dtype=torch.float64)
    probs, certified = topk_sparsemax(scores, 2)
    full = sparsemax(scores, -1)
    assert 0 < certified.sum() < len(certified), "the sample should contain both cases"
    torch.testing.assert_close(probs[certified], full[certified])
    # Without the certificate top-k differs exactly when sparsemax needs more than k.
    differs = (probs[~certified] - full[~certified]).abs().amax(1) > 1e-9
    assert differs.any() and torch.equal(differs, full[~certified].gt(0).sum(1) > 2)
    assert bool(topk_sparsemax(scores, 12)[1].all())  # k = K is sparsemax


def gradient_samples(name, scores_row, costs, n, **options):
    """Per-sample gradients in the scores of one estimator on n copies of one row, for the
    loss z . costs (a fixed cost per z, so the exact gradient is known)."""
    torch.manual_seed(2)
    scores = scores_row.expand(n, K).clone().requires_grad_()
    estimator = build_estimator(name, **options)
    features = torch.ones(n, 3, dtype=scores.dtype)
    estimator(scores.detach(), lambda rows, z: z @ costs, features=features)  # baselines now far from 0
    est = estimator(scores, lambda rows, z: z @ costs, features=features)
    (grad,) = torch.autograd.grad(est.surrogate.sum(), scores)
    return grad, est


@pytest.mark.parametrize("name,options", [("sfe", {}), ("sfe_plus", {}), ("nvil", {}),
                                          ("sum_and_sample", {"summed": 1}), ("sum_and_sample", {"summed": 3}),
                                          ("unordered_set", {"set_size": 2}), ("unordered_set", {"set_size": 4})])
def test_monte_carlo_gradients_are_unbiased(name, options):
    """Mean of n per-sample gradients against the exact p * (c - p.c), within 5 standard errors,
    once the baselines have moved away from zero (a baseline that biases would show)."""
    scores_row = torch.tensor([0.5, -0.3, 1.2, 0.1, -1.0], dtype=torch.float64)
    costs = torch.tensor([1.0, 3.0, -2.0, 0.5, 2.0], dtype=torch.float64) + 5  # a baseline near 6.4
    p = torch.softmax(scores_row, -1)
    exact = p * (costs - (p * costs).sum())
    n = 40000
    grad, est = gradient_samples(name, scores_row, costs, n, **options)
    mean, stderr = grad.mean(0), grad.std(0) / math.sqrt(n)
    assert bool(((mean - exact).abs() <= 5 * stderr + 1e-9).all()), (mean, exact, stderr)
    assert abs(est.loss.mean().item() - (p * costs).sum().item()) <= 5 * est.loss.std().item() / math.sqrt(n)
    torch.testing.assert_close(est.surrogate, est.loss)  # the surrogate's value is the loss estimate


@pytest.mark.parametrize("name", ["gumbel", "st_gumbel"])
def test_gumbel_estimators_sample_from_pi_and_anneal(name):
    scores_row = torch.tensor([0.5, -0.3, 1.2, 0.1, -1.0], dtype=torch.float64)
    estimator = build_estimator(name, gumbel_temperature=0.1, gumbel_min_temperature=0.05, gumbel_anneal_rate=0.1)
    scores = scores_row.expand(40000, K).clone().requires_grad_()
    est = estimator(scores, lambda rows, z: z[:, 2])  # the (relaxed) weight on z = 2
    p2 = torch.softmax(scores_row, -1)[2].item()
    # Hard straight-through samples are drawn from pi; at a low temperature the
    # relaxed samples are nearly one-hot, so their mean is near pi too.
    tol = 5 * math.sqrt(p2 * (1 - p2) / 40000) + (0 if name == "st_gumbel" else 0.02)
    assert abs(est.loss.mean().item() - p2) <= tol
    (grad,) = torch.autograd.grad(est.surrogate.sum(), scores)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    assert estimator.temperature() == pytest.approx(0.1 * math.exp(-0.1))  # one training step
    estimator.step.fill_(100)
    assert estimator.temperature() == 0.05


def test_unordered_set_probability_by_enumeration():
    """P(S) against the sum over every ordered draw without replacement that yields S."""
    p = torch.tensor([[0.1, 0.2, 0.3, 0.15, 0.25]], dtype=torch.float64)
    subset = [0, 2, 3]
    exact = 0.0
    for order in itertools.permutations(subset):
        prob, left = 1.0, 1.0
        for i in order:
            prob, left = prob * p[0, i].item() / left, left - p[0, i].item()
        exact += prob
    assert unordered_set_probability(p[:, subset]).item() == pytest.approx(exact)
    # Every size-3 set together carries all the probability.
    total = sum(unordered_set_probability(p[:, list(c)]).item() for c in itertools.combinations(range(5), 3))
    assert total == pytest.approx(1.0)


def test_unordered_set_is_finite_on_peaked_distributions():
    """256 categories, one with nearly all the mass (as a trained sender's are): the
    set probabilities must not cancel to 0 / 0."""
    torch.manual_seed(8)
    scores = torch.randn(64, 256) * 3
    scores[:, 7] += 60  # the rest share about e^-60 of the mass
    scores.requires_grad_()
    est = build_estimator("unordered_set", set_size=4)(scores, lambda rows, z: (z * torch.arange(256.0)).sum(1))
    (grad,) = torch.autograd.grad(est.surrogate.sum(), scores)
    assert torch.isfinite(est.loss).all() and torch.isfinite(grad).all()
    torch.testing.assert_close(est.loss, torch.full((64,), 7.0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["sfe", "sfe_plus", "nvil"])
def test_monte_carlo_gradients_are_unbiased_on_bitvectors(name):
    """Over {0,1}^3 with a cost per structure: the exact gradient by enumeration of the
    mean-field Bernoulli's 8 structures."""
    space = BitVector(3)
    every = torch.tensor(list(itertools.product([0.0, 1.0], repeat=3)), dtype=torch.float64)
    cost_table = torch.tensor([3.0, -1.0, 2.5, 0.5, 4.0, 1.0, -2.0, 6.0], dtype=torch.float64) + 5

    def cost(rows, z):
        index = (z.round() @ torch.tensor([4.0, 2.0, 1.0], dtype=z.dtype)).long()
        return cost_table[index] + 0 * z.sum(1)

    scores_row = torch.tensor([0.4, -0.7, 1.1], dtype=torch.float64, requires_grad=True)
    exact_value = (space.log_prob(scores_row.expand(8, 3), every).exp() * cost_table).sum()
    (exact,) = torch.autograd.grad(exact_value, scores_row)
    n = 40000
    torch.manual_seed(6)
    scores = scores_row.detach().expand(n, 3).clone().requires_grad_()
    estimator = build_estimator(name, space=space)
    features = torch.ones(n, 2, dtype=torch.float64)
    estimator(scores.detach(), cost, features=features)
    est = estimator(scores, cost, features=features)
    (grad,) = torch.autograd.grad(est.surrogate.sum(), scores)
    mean, stderr = grad.mean(0), grad.std(0) / math.sqrt(n)
    assert bool(((mean - exact).abs() <= 5 * stderr + 1e-9).all()), (mean, exact, stderr)
    torch.testing.assert_close(est.entropy, space.entropy(scores.detach()))


def test_topk_sparsemax_over_bitvectors_equals_sparsemax_over_every_structure_when_certified():
    torch.manual_seed(7)
    every = torch.tensor(list(itertools.product([0.0, 1.0], repeat=5)), dtype=torch.float64)
    scores = torch.randn(200, 5, dtype=torch.float64) * 0.4
    weights = torch.randn(5, dtype=torch.float64)
    estimator = build_estimator("topk_sparsemax", topk=4, space=BitVector(5))
    est = estimator(scores, lambda rows, z: torch.sin(z @ weights))
    full = sparsemax(scores @ every.T, -1)
    exact = (full * torch.sin(every @ weights)).sum(1)
    certified = estimator.last_certified
    assert 0 < certified.sum() < len(certified)
    torch.testing.assert_close(est.loss[certified], exact[certified])
    assert bool((est.decoder_calls <= 4).all())
    torch.testing.assert_close(est.entropy[certified], -(full * full.clamp_min(1e-300).log()).sum(1)[certified])


def test_registry():
    assert {"dense", "sparsemax", "topk_sparsemax", "sparsemap", "sparsemap_budget", "sfe", "sfe_plus", "nvil",
            "gumbel", "st_gumbel", "sum_and_sample", "unordered_set"} <= set(ESTIMATORS)
    with pytest.raises(ValueError, match="--estimator dense: works on Categorical latents, not BitVector"):
        build_estimator("dense", space=BitVector(4))
    with pytest.raises(ValueError, match="--estimator sparsemap: needs a bit-vector latent space, not None"):
        build_estimator("sparsemap")
    with pytest.raises(ValueError, match="--estimator 'nope': choose one of"):
        build_estimator("nope")
    with pytest.raises(ValueError, match="needs the example features"):
        build_estimator("nvil")(torch.zeros(2, K), lambda rows, z: z.sum(1))
