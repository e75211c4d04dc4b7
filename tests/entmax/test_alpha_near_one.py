"""alpha-entmax's forward pass near alpha = 1, where float32 cannot resolve the power
1/(alpha - 1), and inputs softmax refuses: rows sum to 1 at every accepted alpha, and
integer scores are an error (against the `entmax` package's float64 bisection)."""

import entmax as entmax_package
import pytest
import torch

from fairseq_sparse.entmax import attend, entmax15, entmax_alpha, get_normalizer, sparsemax, use_backend
from fairseq_sparse.modules import AlphaEntmaxAttention, HeadAlpha


def scores(rows=300, d=40, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return (torch.randn(rows, d, dtype=torch.float64) * 3).to(dtype)


@pytest.mark.parametrize("backend", ["torch", "cpp"])
@pytest.mark.parametrize("delta", [1.2e-7, 1e-6, 1e-4, 1e-3, 5e-3])
def test_float32_rows_sum_to_one_near_alpha_one(backend, delta):
    x = scores()
    with use_backend(backend):
        y = entmax_alpha(x, torch.tensor(1 + delta))
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.sum(-1), torch.ones(len(x)), atol=1e-6, rtol=0)
    want = entmax_package.entmax_bisect(x.double(), 1 + float(torch.tensor(1 + delta)) - 1, n_iter=80)
    torch.testing.assert_close(y.double(), want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("delta", [1e-14, 1e-11])
def test_float64_alpha_closer_to_one_than_it_resolves_is_softmax(delta):
    x = scores(dtype=torch.float64)
    y = entmax_alpha(x, torch.tensor(1 + delta, dtype=torch.float64))
    torch.testing.assert_close(y.sum(-1), torch.ones(len(x), dtype=torch.float64), atol=5e-8, rtol=0)
    torch.testing.assert_close(y, torch.softmax(x, -1), atol=1e-7, rtol=0)


def test_gradients_near_one_are_finite_and_in_float32():
    x = scores(rows=20).requires_grad_()
    alpha = torch.tensor(1 + 1e-6, requires_grad=True)
    y = entmax_alpha(x, alpha)
    (y * torch.randn_like(y)).sum().backward()
    assert x.grad.dtype == torch.float32 and alpha.grad.dtype == torch.float32
    assert bool(torch.isfinite(x.grad).all()) and bool(torch.isfinite(alpha.grad))


def test_head_alpha_at_the_paper_bound_never_reaches_one():
    head = HeadAlpha(3, init=1.5, alpha_min=1.0)
    with torch.no_grad():
        head.pre_alpha.fill_(-60.0)  # sigmoid 1e-26: 1 + that is 1 in float32
    alpha = head()
    assert bool((alpha > 1).all())
    x = scores(rows=3 * 5).view(1, 3, 5, 40)
    y = get_normalizer("alpha_entmax")(x, alpha=alpha.view(1, 3, 1, 1), alpha_min=head.alpha_min)
    torch.testing.assert_close(y.sum(-1), torch.ones(1, 3, 5), atol=1e-6, rtol=0)
    torch.testing.assert_close(y, torch.softmax(x, -1), atol=1e-6, rtol=0)


def test_attention_with_alpha_min_one_at_its_bound_is_softmax_not_nan():
    torch.manual_seed(0)
    attn = AlphaEntmaxAttention(16, 4, normalizer="alpha_entmax", alpha_init=1.5, alpha_min=1.0,
                                self_attention=True)
    with torch.no_grad():
        attn.head_alpha.pre_alpha.fill_(-60.0)
    x = torch.randn(7, 2, 16)
    out, weights = attn(x, x, x, need_weights=True, need_head_weights=True)
    assert bool(torch.isfinite(out).all())
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 2, 7), atol=1e-6, rtol=0)


def test_attention_near_one_uses_the_precise_path():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 8) * 3 for _ in range(3))
    out, _ = attend(q, k, v, get_normalizer("alpha_entmax"), alpha=torch.full((2,), 1 + 1e-6, dtype=torch.float64))
    want = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
    torch.testing.assert_close(out, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("normalize", [sparsemax, entmax15, lambda x: entmax_alpha(x, 1.3)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_non_float_scores_are_refused(normalize, dtype):
    with pytest.raises(TypeError, match="floating-point scores.*" + str(dtype).replace("torch.", "")):
        normalize(torch.tensor([[1, 1, 1]]).to(dtype))


def test_a_float_alpha_just_above_one_is_taken_and_a_rounded_tensor_is_named():
    """entmax_alpha(x, 1 + 1e-8) was refused with "got values in [1.0, 1.0]": float32 had
    rounded the alpha it was given."""
    x = torch.randn(4, 7)
    torch.testing.assert_close(entmax_alpha(x, 1 + 1e-8), torch.softmax(x, -1), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"got values in \[1.0, 1.0\] \(if it was meant to be just above 1: "
                                         r"torch.float32 rounds it to 1; give a float64 tensor\)"):
        entmax_alpha(x, torch.tensor(1 + 1e-8))
    with pytest.raises(ValueError, match=r"got values in \[2.5, 2.5\]$"):
        entmax_alpha(x, 2.5)
