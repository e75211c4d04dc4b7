"""SparseMAP by the active-set method against the brute-force QP over every bit-vector,
with and without a budget; its backward pass against finite differences."""

import itertools

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from fairseq_sparse.latent import BitVector, active_set, sparsemap


def brute_force(theta, budget=None):
    """min_p 1/2 ||M p||^2 - theta . M p over the simplex of all 2^D structures (the ones
    within budget), by SLSQP: returns (objective, marginals mu = M p)."""
    d = len(theta)
    every = np.array(list(itertools.product([0.0, 1.0], repeat=d)))
    if budget is not None:
        every = every[every.sum(1) <= budget]
    t = theta.numpy()

    def objective(p):
        mu = p @ every
        return 0.5 * mu @ mu - t @ mu

    def gradient(p):
        return every @ (p @ every - t)

    n = len(every)
    result = minimize(objective, np.full(n, 1.0 / n), jac=gradient, method="SLSQP", bounds=[(0, 1)] * n,
                      constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1, "jac": lambda p: np.ones(n)}],
                      options={"ftol": 1e-14, "maxiter": 1000})
    return result.fun, torch.tensor(result.x @ every)


@pytest.mark.parametrize("budget", [None, 2])
def test_active_set_equals_brute_force(budget):
    torch.manual_seed(0)
    space = BitVector(4, budget)
    for _ in range(10):
        theta = torch.randn(4, dtype=torch.float64)
        structures, p = active_set(theta, space.map)
        mu = p @ structures
        fun, mu_bf = brute_force(theta, budget)
        assert 0.5 * mu @ mu - theta @ mu == pytest.approx(fun, abs=1e-8)
        torch.testing.assert_close(mu, mu_bf, atol=1e-5, rtol=0)
        assert bool((p > 0).all()) and p.sum().item() == pytest.approx(1.0)
        assert len(p) <= 5  # Caratheodory: at most D + 1 structures
        if budget is not None:
            assert bool((structures.sum(1) <= budget).all())
    # Without a budget the marginals are the projection onto the cube: clip(theta, 0, 1).
    if budget is None:
        theta = torch.tensor([1.7, 0.3, -0.4, 0.55], dtype=torch.float64)
        structures, p = active_set(theta, space.map)
        torch.testing.assert_close(p @ structures, theta.clamp(0, 1))


@pytest.mark.parametrize("budget", [None, 3])
def test_backward_passes_gradcheck(budget):
    """The marginals mu = sum_s p_s(theta) z_s through the backward pass of p.  (mu is
    unique; the weights p need not be, so a nonlinear function of them is smooth only
    while the active set stays put, which is checked separately below.)"""
    torch.manual_seed(3)
    space = BitVector(6, budget)

    def marginals(theta):
        p, z = sparsemap(theta, space)
        return (p[..., None] * z).sum(1)

    theta = (torch.randn(5, 6, dtype=torch.float64) * 0.6 + 0.4).requires_grad_()
    assert (sparsemap(theta, space)[0] > 0).sum(1).float().mean() > 1.5  # sparse, yet not a single structure
    assert torch.autograd.gradcheck(marginals, (theta,), eps=1e-6, atol=1e-6)


def test_backward_of_the_weights_where_the_active_set_is_stable():
    """d/dtheta sum_s p_s f(z_s) for a nonlinear f, against central differences in the
    directions that leave the active set unchanged."""
    torch.manual_seed(5)
    space = BitVector(5, 3)
    weights = torch.randn(5, dtype=torch.float64)
    checked = 0
    for _ in range(20):
        theta = (torch.randn(1, 5, dtype=torch.float64) * 0.6 + 0.4).requires_grad_()
        p, z = sparsemap(theta, space)
        (grad,) = torch.autograd.grad((p * torch.sin(z @ weights)).sum(), theta)
        for i in range(5):
            step = torch.zeros_like(theta)
            step[0, i] = 1e-6
            values = []
            for sign in (1, -1):
                p2, z2 = sparsemap(theta.detach() + sign * step, space)
                if {tuple(r) for r in z2[0][p2[0] > 0].tolist()} != {tuple(r) for r in z[0][p[0] > 0].tolist()}:
                    break
                values.append((p2 * torch.sin(z2 @ weights)).sum().item())
            else:
                assert grad[0, i].item() == pytest.approx((values[0] - values[1]) / 2e-6, abs=1e-5)
                checked += 1
    assert checked > 50


def test_large_bitvectors_stay_sparse():
    torch.manual_seed(4)
    theta = torch.randn(8, 128, dtype=torch.float64) * 0.3 + 0.5
    p, z = sparsemap(theta, BitVector(128, 64))
    support = (p > 0).sum(1)
    assert bool((support <= 129).all()) and bool((z.sum(-1) <= 64).all())
    torch.testing.assert_close(p.sum(1), torch.ones(8, dtype=torch.float64))


def brute_force_two_states(theta, budget=None):
    """The paper's factor by brute force: min_p 1/2 ||[M; 1 - M] p||^2 - [theta; 0] . [M; 1 - M] p
    over every structure's probability (SLSQP); returns the marginals M p."""
    d = len(theta)
    every = np.array(list(itertools.product([0.0, 1.0], repeat=d)))
    if budget is not None:
        every = every[every.sum(1) <= budget]
    doubled, t = np.concatenate([every, 1 - every], 1), np.concatenate([theta.numpy(), np.zeros(d)])
    n = len(every)
    result = minimize(lambda p: 0.5 * (p @ doubled) @ (p @ doubled) - t @ (p @ doubled), np.full(n, 1.0 / n),
                      jac=lambda p: doubled @ (p @ doubled - t), method="SLSQP", bounds=[(0, 1)] * n,
                      constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1, "jac": lambda p: np.ones(n)}],
                      options={"ftol": 1e-14, "maxiter": 1000})
    return torch.tensor(result.x @ every)


@pytest.mark.parametrize("budget", [None, 2])
def test_two_bit_states_is_the_paper_s_factor(budget):
    torch.manual_seed(1)
    space = BitVector(4, budget)
    for _ in range(6):
        theta = 1.5 * torch.randn(1, 4, dtype=torch.float64)
        p, structures = sparsemap(theta, space, bit_states=2)
        torch.testing.assert_close((p[0] @ structures[0]), brute_force_two_states(theta[0], budget), atol=1e-5,
                                   rtol=0)
    if budget is None:  # fractional on (-1, 1): mu = clip((theta + 1) / 2, 0, 1)
        theta = torch.tensor([[1.7, 0.3, -0.4, -1.2]], dtype=torch.float64)
        p, structures = sparsemap(theta, space, bit_states=2)
        torch.testing.assert_close(p[0] @ structures[0], ((theta[0] + 1) / 2).clamp(0, 1))
    with pytest.raises(ValueError, match="bit_states 3"):
        sparsemap(theta, space, bit_states=3)
