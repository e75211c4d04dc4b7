"""The fused C++ kernel agrees with the pure-PyTorch reference on attention-shaped inputs."""

import pytest
import torch

from fairseq_sparse.entmax import entmax15, entmax_alpha, has_cpp_kernel, sparsemax, use_backend

pytestmark = pytest.mark.skipif(not has_cpp_kernel(), reason="C++ kernel not built")


def run(fn, x, up, backend):
    x = x.clone().requires_grad_()
    with use_backend(backend):
        y = fn(x)
        y.backward(up)
    return y.detach(), x.grad


def outputs(x, up, backend, dtype):
    """(y, dx, dalpha) of each normaliser, computed in `dtype`, returned in float64."""
    results = []
    for fn in (sparsemax, entmax15):
        results += run(fn, x.to(dtype), up.to(dtype), backend)
    a = torch.tensor([1.05, 1.3, 1.6, 1.95], dtype=dtype).view(1, 4, 1, 1).requires_grad_()
    results += run(lambda z: entmax_alpha(z, a), x.to(dtype), up.to(dtype), backend)
    results.append(a.grad)
    return [r.double() for r in results]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])
def test_kernel_matches_reference(dtype, scale):
    """float64: kernel == reference; float32: kernel within float32 accuracy of the float64 truth."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 24, 96, dtype=torch.float64) * scale
    x[0, :, :, 80:] = float("-inf")
    up = torch.randn_like(x)
    truth = outputs(x, up, "torch", torch.float64)
    tol = dict(atol=2e-6, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-8)
    got = outputs(x, up, "cpp", dtype)
    for g, want in zip(got[:-1], truth[:-1]):
        torch.testing.assert_close(g, want, **tol)
    # d/d alpha divides by (alpha - 1)^2 = 0.0025 at alpha = 1.05, amplifying the
    # float32 rounding of y about 400-fold: 1e-3 relative is float32's limit there.
    alpha_tol = dict(atol=1e-5, rtol=1e-3) if dtype == torch.float32 else tol
    torch.testing.assert_close(got[-1], truth[-1], **alpha_tol)


@pytest.mark.parametrize("alpha", [1.01, 1.1, 1.25, 1.5, 1.99])
def test_float32_kernel_over_wide_rows(alpha):
    """The float32 kernel evaluates powers with its own vectorised exp/log: check
    them where they are stressed, exponents up to 1/(alpha - 1) = 100 (underflow
    to exact zeros), rows of odd lengths (vector remainders) and long rows."""
    torch.manual_seed(1)
    for d in (7, 333, 1024):
        x = torch.randn(64, d, dtype=torch.float64) * 3
        up = torch.randn_like(x)
        a = torch.full((64, 1), alpha, dtype=torch.float64)
        y_ref, dx_ref = run(lambda z: entmax_alpha(z, a), x, up, "torch")
        y, dx = run(lambda z: entmax_alpha(z, a.float()), x.float(), up.float(), "cpp")
        torch.testing.assert_close(y.double(), y_ref, atol=2e-6, rtol=1e-4)
        torch.testing.assert_close(dx.double(), dx_ref, atol=1e-5, rtol=1e-3)
        assert bool((y[y_ref > 1e-30] > 0).all()), "an entry of the support became zero"
        assert bool((y[y_ref == 0] == 0).all()), "an entry off the support became nonzero"
