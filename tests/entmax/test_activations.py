"""fairseq_sparse.entmax against the authors' `entmax` package, gradcheck and edge cases.

Every test runs on both backends: the pure-PyTorch reference and the fused C++ kernel.
"""

import entmax as oracle
import pytest
import torch

from fairseq_sparse.entmax import (
    entmax15,
    entmax_alpha,
    has_cpp_kernel,
    sparsemax,
    support_size,
    use_backend,
)

BACKENDS = ["torch", "cpp"]
ALPHAS = [1.01, 1.25, 1.5, 1.75, 2.0]


@pytest.fixture(params=BACKENDS, autouse=True)
def backend(request):
    if request.param == "cpp" and not has_cpp_kernel():
        pytest.fail("the C++ kernel is not built (scripts/setup_env.sh builds it)")
    with use_backend(request.param):
        yield request.param


def score_cases():
    g = torch.Generator().manual_seed(0)
    rand = torch.randn(6, 5, 33, generator=g, dtype=torch.float64)
    tied = torch.randint(-3, 4, (6, 5, 33), generator=g).double() / 2  # many exact ties
    return {
        "random": rand,
        "peaked": rand * 20,
        "tied": tied,
        "large": rand * 1e4,
        "tiny": rand * 1e-4,
    }


@pytest.mark.parametrize("case", list(score_cases()))
def test_sparsemax_and_entmax15_match_reference_package(case):
    x = score_cases()[case]
    torch.testing.assert_close(sparsemax(x), oracle.sparsemax(x, dim=-1), atol=1e-6, rtol=0)
    torch.testing.assert_close(entmax15(x), oracle.entmax15(x, dim=-1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("case", list(score_cases()))
@pytest.mark.parametrize("alpha", ALPHAS)
def test_entmax_alpha_matches_bisection(case, alpha):
    x = score_cases()[case]
    ref = oracle.entmax_bisect(x, alpha, dim=-1, n_iter=80)
    torch.testing.assert_close(entmax_alpha(x, alpha), ref, atol=1e-6, rtol=0)


def test_per_head_alpha_matches_bisection_head_by_head():
    x = torch.randn(3, 4, 7, 9, dtype=torch.float64)
    alpha = torch.tensor([1.01, 1.3, 1.7, 2.0], dtype=torch.float64).view(1, 4, 1, 1)
    p = entmax_alpha(x, alpha)
    for h in range(4):
        ref = oracle.entmax_bisect(x[:, h], alpha[0, h, 0, 0].item(), dim=-1, n_iter=80)
        torch.testing.assert_close(p[:, h], ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dim", [0, 1, 2, -2])
def test_any_dim(dim):
    x = torch.randn(5, 6, 7, dtype=torch.float64)
    torch.testing.assert_close(sparsemax(x, dim=dim), oracle.sparsemax(x, dim=dim), atol=1e-6, rtol=0)
    torch.testing.assert_close(entmax15(x, dim=dim), oracle.entmax15(x, dim=dim), atol=1e-6, rtol=0)
    ref = oracle.entmax_bisect(x, 1.3, dim=dim, n_iter=80)
    torch.testing.assert_close(entmax_alpha(x, 1.3, dim=dim), ref, atol=1e-6, rtol=0)
    alpha_shape = [1, 1, 1]
    alpha_shape[(dim + 3) % 3 - 1] = x.shape[(dim + 3) % 3 - 1]  # vary alpha along another dim
    alpha = 1.2 + 0.7 * torch.rand(alpha_shape, dtype=torch.float64)
    y = entmax_alpha(x, alpha, dim=dim)
    torch.testing.assert_close(y.sum(dim), torch.ones_like(y.sum(dim)))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_gradcheck_x_and_alpha(alpha):
    torch.manual_seed(1)
    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    a = torch.tensor(alpha, dtype=torch.float64, requires_grad=alpha < 2)
    assert torch.autograd.gradcheck(lambda x_, a_: entmax_alpha(x_, a_), (x, a))


def test_gradcheck_per_head_alpha():
    torch.manual_seed(2)
    x = torch.randn(2, 4, 3, 5, dtype=torch.float64, requires_grad=True)
    a = torch.tensor([1.01, 1.25, 1.5, 1.75], dtype=torch.float64).view(1, 4, 1, 1).requires_grad_()
    assert torch.autograd.gradcheck(lambda x_, a_: entmax_alpha(x_, a_), (x, a))


@pytest.mark.parametrize("fn", [sparsemax, entmax15], ids=["sparsemax", "entmax15"])
def test_gradcheck_fixed_alpha(fn):
    torch.manual_seed(3)
    x = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x_: fn(x_, dim=1), (x,))


def test_gradient_matches_reference_package():
    torch.manual_seed(4)
    x = torch.randn(4, 10, dtype=torch.float64, requires_grad=True)
    alpha = torch.tensor([[1.1], [1.4], [1.6], [1.9]], dtype=torch.float64, requires_grad=True)
    up = torch.randn(4, 10, dtype=torch.float64)
    gx, ga = torch.autograd.grad((entmax_alpha(x, alpha) * up).sum(), (x, alpha))
    rx, ra = torch.autograd.grad((oracle.entmax_bisect(x, alpha, dim=-1, n_iter=80) * up).sum(), (x, alpha))
    torch.testing.assert_close(gx, rx, atol=1e-6, rtol=0)
    torch.testing.assert_close(ga, ra, atol=1e-6, rtol=0)


ALL = {
    "sparsemax": lambda x: sparsemax(x),
    "entmax15": lambda x: entmax15(x),
    # alpha kept in float64 so that low-precision inputs share exactly the same alphas
    "alpha": lambda x: entmax_alpha(x, torch.tensor([1.2, 1.6, 2.0], dtype=torch.float64).view(3, 1, 1)),
}


@pytest.mark.parametrize("name", list(ALL))
def test_masking_and_fully_masked_rows(name):
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    x[:, :, 5:] = float("-inf")
    x[1, 2, :] = float("-inf")  # a fully masked row
    x.requires_grad_()
    y = ALL[name](x)
    assert torch.isfinite(y).all()
    assert (y[:, :, 5:] == 0).all()
    assert (y[1, 2] == 0).all()
    live = torch.ones(3, 4, dtype=torch.bool)
    live[1, 2] = False
    torch.testing.assert_close(y.sum(-1)[live], torch.ones(11, dtype=torch.float64))
    y.backward(torch.randn_like(y))
    assert torch.isfinite(x.grad).all()
    assert (x.grad[1, 2] == 0).all()
    assert (x.grad[:, :, 5:] == 0).all()


def test_masked_alpha_gradient_is_finite():
    x = torch.full((2, 5), float("-inf"), dtype=torch.float64)
    x[0, :3] = torch.tensor([0.3, 0.1, -0.2])
    a = torch.tensor([[1.4], [1.4]], dtype=torch.float64, requires_grad=True)
    entmax_alpha(x, a).sum().backward()
    assert torch.isfinite(a.grad).all() and a.grad[1].item() == 0


@pytest.mark.parametrize("name", list(ALL))
def test_outputs_are_distributions(name):
    x = torch.randn(3, 50, 40) * 5
    y = ALL[name](x)
    assert (y >= 0).all()
    torch.testing.assert_close(y.sum(-1), torch.ones(3, 50), atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(ALL))
def test_low_precision_inputs_computed_in_float32(name, dtype):
    x = torch.randn(3, 6, 20)
    y = ALL[name](x.to(dtype))
    assert y.dtype == dtype
    expected = ALL[name](x.to(dtype).float()).to(dtype)
    assert torch.equal(y, expected)
    xr = x.to(dtype).requires_grad_()
    ALL[name](xr).float().sum().backward()
    assert xr.grad.dtype == dtype


def test_alpha_gradient_keeps_alpha_shape_and_dtype():
    x = torch.randn(2, 3, 4, 5)
    a = torch.full((1, 3, 1, 1), 1.5, requires_grad=True)
    (entmax_alpha(x, a) * torch.randn_like(x)).sum().backward()
    assert a.grad.shape == a.shape and a.grad.dtype == a.dtype


@pytest.mark.parametrize("bad", [1.0, 0.5, 2.5, float("nan")])
def test_alpha_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match=r"alpha must lie in \(1, 2\]"):
        entmax_alpha(torch.randn(2, 5), bad)


def test_alpha_shape_errors_name_the_problem():
    with pytest.raises(ValueError, match="size 1 along dim"):
        entmax_alpha(torch.randn(2, 5), torch.full((2, 5), 1.5))
    with pytest.raises(ValueError, match="does not broadcast"):
        entmax_alpha(torch.randn(2, 5), torch.full((3, 1), 1.5))


def test_support_size():
    p = sparsemax(torch.tensor([[3.0, 1.0, 0.0, -5.0], [0.0, 0.0, 0.0, 0.0]]))
    assert support_size(p).tolist() == [1, 4]
    assert support_size(torch.softmax(torch.randn(2, 7), -1)).tolist() == [7, 7]


def test_lower_alpha_is_denser():
    x = torch.randn(200, 64)
    sizes = [support_size(entmax_alpha(x, a)).float().mean().item() for a in (1.05, 1.3, 1.6, 2.0)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 3 * sizes[-1]


NORMALIZERS = {"sparsemax": sparsemax, "entmax15": entmax15,
               "alpha": lambda x, dim=-1: entmax_alpha(x, torch.tensor(1.3, dtype=x.dtype), dim=dim),
               "softmax": torch.softmax}


@pytest.mark.parametrize("shape, dim", [((3, 0), -1), ((0, 5), -1), ((3, 0), 0), ((2, 0, 4), 1), ((), -1), ((), 0)])
@pytest.mark.parametrize("name", ["sparsemax", "entmax15", "alpha"])
def test_shapes_without_rows_behave_as_softmax(name, shape, dim):
    """An empty tensor (no rows, or rows of no entries) gives an empty result and a 0-d
    tensor probability 1, with a gradient, as torch.softmax does (these crashed with
    reshape and index errors)."""
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    y = NORMALIZERS[name](x, dim=dim)
    want = torch.softmax(x.detach(), dim)
    assert y.shape == want.shape and y.dtype == want.dtype
    torch.testing.assert_close(y.detach(), want)
    y.sum().backward()
    assert x.grad.shape == x.shape and (x.grad == 0).all()


@pytest.mark.parametrize("name", ["sparsemax", "entmax15", "alpha"])
def test_a_dim_out_of_range_is_an_index_error_that_says_so(name):
    with pytest.raises(IndexError, match="out of range"):
        NORMALIZERS[name](torch.randn(2, 3, dtype=torch.float64), dim=2)


def test_backend_choice_holds_in_its_own_thread_only(backend):
    """use_backend is per thread: another thread's block neither reaches this thread's
    calls nor outlives itself, and this thread's choice does not reach a new thread."""
    import threading

    from fairseq_sparse.entmax import current_backend

    entered, release, seen = threading.Event(), threading.Event(), []

    def other():
        seen.append(current_backend())
        with use_backend("torch" if backend == "cpp" else "cpp"):
            entered.set()
            release.wait(10)
            seen.append(current_backend())
        seen.append(current_backend())

    thread = threading.Thread(target=other)
    thread.start()
    assert entered.wait(10)
    assert current_backend() == backend
    release.set()
    thread.join(10)
    assert seen == ["auto", "torch" if backend == "cpp" else "cpp", "auto"] and current_backend() == backend


@pytest.mark.parametrize("normalizer", ["sparsemax", "entmax15", "entmax_alpha"])
def test_double_backward_matches_finite_differences(normalizer):
    """A gradient taken with create_graph=True has a history of its own (a gradient penalty,
    a Hessian-vector product): second derivatives against finite differences in float64,
    in x and in a per-row alpha."""
    from torch.autograd import gradgradcheck

    from fairseq_sparse.entmax import entmax15, entmax_alpha, sparsemax

    torch.manual_seed(0)
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    if normalizer == "entmax_alpha":
        alpha = torch.tensor([[1.3], [1.6], [1.9]], dtype=torch.float64, requires_grad=True)
        assert gradgradcheck(entmax_alpha, (x, alpha))
    else:
        assert gradgradcheck({"sparsemax": sparsemax, "entmax15": entmax15}[normalizer], (x,))
    # The penalty term of float32 scores keeps its graph (it was silently dropped).
    x32 = torch.randn(2, 5, requires_grad=True)
    f = (lambda t: entmax_alpha(t, 1.4)) if normalizer == "entmax_alpha" else {"sparsemax": sparsemax,
                                                                             "entmax15": entmax15}[normalizer]
    (g,) = torch.autograd.grad((f(x32) * torch.arange(5.0)).sum(), x32, create_graph=True)
    assert g.requires_grad


def test_entmax_loss_refuses_double_backward():
    from fairseq_sparse.entmax.losses import entmax_loss

    z = torch.randn(4, 7, requires_grad=True)
    loss = entmax_loss(z, torch.tensor([0, 1, 2, 3]), 1.5).sum()
    with pytest.raises(RuntimeError, match="entmax_loss has no double backward"):
        torch.autograd.grad(loss, z, create_graph=True)
