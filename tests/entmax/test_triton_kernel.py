"""The Triton kernel agrees with the float64 reference and with the authors' ``entmax``
package: on CUDA where there is a GPU, otherwise on CPU tensors under Triton's
interpreter (``TRITON_INTERPRET=1``, set by tests/conftest.py on machines without
CUDA), which runs the kernels' own code through numpy.  Skipped without Triton."""

import entmax as reference_package
import pytest
import torch

from fairseq_sparse.entmax import entmax15, entmax_alpha, has_triton_kernel, sparsemax, use_backend
from fairseq_sparse.entmax.activations import row_kernels
from tests.entmax.test_cpp_kernel import run

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(not (has_triton_kernel() and (DEVICE == "cuda" or row_kernels.INTERPRET)),
                                reason="needs Triton, and CUDA or TRITON_INTERPRET=1")
ALPHAS = torch.tensor([1.01, 1.1, 1.3, 1.5, 1.7, 1.99])


def assert_alpha_grad_close(got, want, dy_l1, alpha):
    """d/d alpha is ill-conditioned near alpha = 1: y = gap^k with k = 1/(alpha - 1)
    carries k times gap's rounding error, and the formula divides by (alpha - 1)^2.
    So float32 can only promise eps * sum|dy| / (alpha - 1)^3 (0.7 at alpha = 1.01 on
    rows of 7; the float32 reference and the C++ kernel miss by 0.05 there)."""
    bound = torch.finfo(torch.float32).eps * dy_l1 / (alpha - 1) ** 3
    err = (got.cpu().double() - want).abs()
    assert bool((err <= bound + 1e-3 * want.abs()).all()), f"alpha gradient off by {err.max().item():.3g}"


def scores(rows, d, scale=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, d, generator=g, dtype=torch.float64) * scale


@pytest.mark.parametrize("d", [1, 7, 100, 513, 3000])
def test_per_row_alpha_matches_float64_reference(d):
    """Forward, gradient in x and gradient in alpha; rows of odd and long lengths,
    alpha from 1.01 (exponent 100) to 1.99."""
    rows = 6 * 16
    x, up = scores(rows, d), scores(rows, d, 1.0, seed=1)
    a = ALPHAS.double().repeat_interleave(16).view(rows, 1)
    a64, a32 = a.clone().requires_grad_(), a.float().to(DEVICE).requires_grad_()
    y_ref, dx_ref = run(lambda z: entmax_alpha(z, a64), x, up, "torch")
    y, dx = run(lambda z: entmax_alpha(z, a32), x.float().to(DEVICE), up.float().to(DEVICE), "triton")
    torch.testing.assert_close(y.cpu().double(), y_ref, atol=2e-6, rtol=1e-4)
    torch.testing.assert_close(dx.cpu().double(), dx_ref, atol=1e-5, rtol=1e-4)
    assert_alpha_grad_close(a32.grad, a64.grad, up.abs().sum(-1, keepdim=True), a)


@pytest.mark.parametrize("fn,ref", [(sparsemax, reference_package.sparsemax),
                                    (entmax15, reference_package.entmax15)], ids=["sparsemax", "entmax15"])
def test_fixed_alpha_matches_reference_package(fn, ref):
    x, up = scores(64, 333), scores(64, 333, 1.0, seed=2)
    y_ref, dx_ref = run(lambda z: ref(z, dim=-1), x, up, "torch")
    y, dx = run(fn, x.float().to(DEVICE), up.float().to(DEVICE), "triton")
    torch.testing.assert_close(y.cpu().double(), y_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(dx.cpu().double(), dx_ref, atol=1e-6, rtol=1e-5)


def test_per_head_alpha_matches_entmax_bisect():
    """Attention-shaped (B, H, T, S) scores with one alpha per head, against the
    authors' bisection, including its gradient in alpha."""
    torch.manual_seed(0)
    x, up = torch.randn(2, 4, 16, 40, dtype=torch.float64), torch.randn(2, 4, 16, 40, dtype=torch.float64)
    a_ref = torch.tensor([1.05, 1.3, 1.6, 1.95], dtype=torch.float64).view(1, 4, 1, 1).requires_grad_()
    a = a_ref.detach().float().to(DEVICE).requires_grad_()
    y_ref, dx_ref = run(lambda z: reference_package.entmax_bisect(z, a_ref, dim=-1, n_iter=100), x, up, "torch")
    y, dx = run(lambda z: entmax_alpha(z, a), x.float().to(DEVICE), up.float().to(DEVICE), "triton")
    torch.testing.assert_close(y.cpu().double(), y_ref, atol=2e-6, rtol=1e-4)
    torch.testing.assert_close(dx.cpu().double(), dx_ref, atol=1e-5, rtol=1e-4)
    assert_alpha_grad_close(a.grad, a_ref.grad, up.abs().sum((0, 2, 3), keepdim=True), a_ref.detach())


@pytest.mark.parametrize("name", ["sparsemax", "entmax15", "alpha"])
def test_masks_and_fully_masked_rows(name):
    fn = {"sparsemax": sparsemax, "entmax15": entmax15,
          "alpha": lambda z: entmax_alpha(z, torch.full((5, 1), 1.3, device=z.device))}[name]
    x = scores(5, 50).float().to(DEVICE)
    x[:2, 30:] = float("-inf")
    x[4] = float("-inf")
    y, dx = run(fn, x, torch.randn_like(x), "triton")
    assert (y[:2, 30:] == 0).all() and (y[4] == 0).all() and (dx[4] == 0).all()
    assert torch.isfinite(dx).all()
    torch.testing.assert_close(y[:4].sum(-1), torch.ones(4, device=DEVICE))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_rows_stay_in_their_dtype(dtype):
    """Half inputs are solved in float32 registers and stored in their own dtype:
    the result is the float32 result rounded once."""
    x, up = scores(32, 200).float().to(DEVICE), scores(32, 200, 1.0, seed=3).float().to(DEVICE)
    a = torch.full((32, 1), 1.4, device=DEVICE)
    y32, dx32 = run(lambda z: entmax_alpha(z, a), x.to(dtype).float(), up.to(dtype).float(), "triton")
    y, dx = run(lambda z: entmax_alpha(z, a), x.to(dtype), up.to(dtype), "triton")
    assert y.dtype == dtype and dx.dtype == dtype
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(y.float(), y32, atol=eps, rtol=eps)
    torch.testing.assert_close(dx.float(), dx32, atol=8 * eps, rtol=8 * eps)


def test_attention_module_uses_the_kernel_and_learns_alpha():
    """AlphaEntmaxAttention with the kernel (on CUDA, the path every model takes): the
    alpha gradient reaches the per-head parameters and equals the reference path's."""
    from fairseq_sparse.modules import AlphaEntmaxAttention

    torch.manual_seed(0)
    attn = AlphaEntmaxAttention(32, 4, self_attention=True, normalizer="alpha_entmax", alpha_init="random").to(DEVICE)
    x = torch.randn(9, 3, 32, device=DEVICE)
    grads = {}
    for backend in ("torch", "triton"):
        attn.zero_grad()
        with use_backend(backend):
            out, _ = attn(x, x, x)
            out.pow(2).sum().backward()
        grads[backend] = [p.grad.clone() for p in attn.parameters()]
    for g_ref, g in zip(grads["torch"], grads["triton"]):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-4)


def test_the_triton_kernel_is_what_runs(monkeypatch):
    """Under use_backend("triton") the rows go to the Triton kernel (on CPU: through the
    interpreter), not to the C++ kernel or the reference; on CPU without it they do not."""
    calls = []
    for name in ("forward", "backward"):
        original = getattr(row_kernels, name)
        monkeypatch.setattr(row_kernels, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
    x = torch.randn(4, 9, device=DEVICE)
    run(lambda z: entmax_alpha(z, torch.full((4, 1), 1.3, device=DEVICE)), x, torch.randn_like(x), "triton")
    assert calls == ["forward", "backward"]
    if DEVICE == "cpu":
        calls.clear()
        run(sparsemax, x, torch.randn_like(x), "auto")
        assert calls == []
