"""The alpha gradient in float32 near alpha = 1 (issue 28, item 3): every backend at
least as accurate as the `entmax` package from alpha = 1.001 to 2, and bounded at
1.0001, against Prop. 1 of Correia et al. (2019) evaluated in float64."""

import entmax as entmax_package
import pytest
import torch

from fairseq_sparse.entmax import entmax_alpha, has_triton_kernel, reference, use_backend
from fairseq_sparse.entmax.activations import row_kernels

BACKENDS = ["torch", "cpp"] + (["triton"] if has_triton_kernel() and (torch.cuda.is_available()
                                                                      or row_kernels.INTERPRET) else [])


def proposition_1(y, dy, alpha):
    """dy . dy/dalpha as the paper writes it (accurate in float64 down to alpha - 1 ~ 1e-4)."""
    on = y > 0
    g = torch.where(on, y.pow(2 - alpha), torch.zeros_like(y))
    p = g / g.sum(-1, keepdim=True)
    ylogy = torch.where(on, y * torch.log(torch.where(on, y, torch.ones_like(y))), torch.zeros_like(y))
    ent = ylogy.sum(-1, keepdim=True)
    return ((dy * (y - p)).sum(-1, keepdim=True) / (alpha - 1) ** 2
            - (dy * (ylogy - p * ent)).sum(-1, keepdim=True) / (alpha - 1))


def median_relative_error(got, want):
    return ((got.double() - want).abs() / want.abs().clamp_min(1e-3)).median().item()


@pytest.mark.parametrize("alpha", [1.0001, 1.001, 1.01, 1.3, 2.0])
def test_float32_alpha_gradient_near_one(alpha):
    torch.manual_seed(0)
    rows = 400
    x = torch.randn(rows, 24, dtype=torch.float64) * 2
    alphas = torch.full((rows, 1), alpha, dtype=torch.float64)
    dy = torch.randn_like(x)
    truth = proposition_1(reference.forward(x, alphas), dy, alphas)

    package_alpha = alphas.float().requires_grad_()
    (entmax_package.entmax_bisect(x.float(), package_alpha, n_iter=60) * dy.float()).sum().backward()
    package = median_relative_error(package_alpha.grad, truth)
    for backend in BACKENDS:
        a = alphas.float().requires_grad_()
        with use_backend(backend):
            (entmax_alpha(x.float(), a) * dy.float()).sum().backward()
        error = median_relative_error(a.grad, truth)
        if alpha >= 1.001:
            assert error <= max(package, 1e-6), f"{backend}: {error:.1e} against the package's {package:.1e}"
        assert error < 1e-3, f"{backend} at alpha {alpha}: {error:.1e}"


def test_the_stable_form_equals_proposition_1_in_float64_and_its_limit_at_one():
    torch.manual_seed(1)
    x = torch.randn(50, 12, dtype=torch.float64)
    dy = torch.randn_like(x)
    for alpha in (1.05, 1.5, 1.99, 2.0):
        a = torch.full((50, 1), alpha, dtype=torch.float64)
        y = reference.forward(x, a)
        torch.testing.assert_close(reference.alpha_gradient(y, dy, a), proposition_1(y, dy, a), rtol=1e-9, atol=1e-12)
    # As alpha -> 1, entmax -> softmax and the gradient -> -sum dy y ((u^2 - var u)/2 + mu u), u = log y - mu.
    y = torch.softmax(x, -1)
    log_y = y.log()
    mu = (y * log_y).sum(-1, keepdim=True)
    u = log_y - mu
    limit = -(dy * y * ((u**2 - (y * u**2).sum(-1, keepdim=True)) / 2 + mu * u)).sum(-1, keepdim=True)
    near = torch.full((50, 1), 1 + 1e-7, dtype=torch.float64)
    torch.testing.assert_close(reference.alpha_gradient(y, dy, near), limit, rtol=1e-5, atol=1e-6)
