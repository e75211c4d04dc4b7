"""NaN and +inf scores: every backend makes the row NaN, as softmax does (issue 28,
item 2), and leaves the other rows of the batch exactly as without them."""

import pytest
import torch

from fairseq_sparse.entmax import entmax15, entmax_alpha, has_triton_kernel, sparsemax, use_backend
from fairseq_sparse.entmax.activations import row_kernels

from count_attention_ops import CountOps  # (counts the read-backs: ops that wait for a GPU)

BACKENDS = ["torch", "cpp"] + (["triton"] if has_triton_kernel() and (torch.cuda.is_available()
                                                                      or row_kernels.INTERPRET) else [])
NORMALIZERS = {"sparsemax": lambda x, a: sparsemax(x), "entmax15": lambda x, a: entmax15(x),
               "alpha_entmax": lambda x, a: entmax_alpha(x, a)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(NORMALIZERS))
def test_nan_and_inf_rows_are_nan_as_in_softmax_and_the_others_untouched(backend, name):
    device = "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(5, 9, device=device)
    x[1, 2] = float("nan")
    x[2, 5] = float("inf")
    x[3, :4] = float("-inf")  # a mask, not an invalid score
    x[4, 0], x[4, 1] = float("inf"), float("-inf")
    alpha = torch.tensor([[1.3], [1.5], [1.7], [1.9], [1.2]], device=device)
    invalid = torch.softmax(x, -1).isnan().any(-1)
    assert invalid.tolist() == [False, True, True, False, True], "softmax's own rule"

    fn = NORMALIZERS[name]
    xs, a = x.clone().requires_grad_(), alpha.clone().requires_grad_()
    with use_backend(backend):
        y = fn(xs, a)
        up = torch.randn_like(y)
        y.backward(up)
    assert y[invalid].isnan().all() and xs.grad[invalid].isnan().all()
    assert a.grad[invalid].isnan().all() if name == "alpha_entmax" else a.grad is None

    # The valid rows alone give the same probabilities and gradients.
    valid = ~invalid
    xv, av = x[valid].clone().requires_grad_(), alpha[valid].clone().requires_grad_()
    with use_backend(backend):
        yv = fn(xv, av)
        yv.backward(up[valid])
    assert torch.equal(y[valid], yv) and torch.equal(xs.grad[valid], xv.grad)
    assert torch.isfinite(y[valid]).all() and torch.allclose(y[valid].sum(-1), torch.ones(2, device=device))
    if name == "alpha_entmax":
        assert torch.equal(a.grad[valid], av.grad)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"])
@pytest.mark.parametrize("name", list(NORMALIZERS))
def test_the_nan_rule_never_waits_for_the_device(backend, name):
    """With the fused kernels the rule above costs no value read back to the host, forward or
    backward: attention calls these in every layer of a training step, and each read-back
    would stall a GPU.  (entmax_alpha's own range check reads alpha back, and attention skips
    it, as here; the pure-PyTorch reference checks its Newton steps on the host.)"""
    device = "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(4, 7, device=device, requires_grad=True)
    alpha = torch.full((4, 1), 1.3, device=device, requires_grad=True)
    fn = {"sparsemax": lambda: sparsemax(x), "entmax15": lambda: entmax15(x),
          "alpha_entmax": lambda: entmax_alpha(x, alpha, check_alpha=False)}[name]
    with use_backend(backend), CountOps() as ops:
        fn().backward(torch.randn(4, 7, device=device))
    assert ops.read_backs == 0
    assert torch.isfinite(x.grad).all()
