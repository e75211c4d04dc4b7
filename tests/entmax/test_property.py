"""A property test over random shapes, dims, dtypes and alphas, with empty and 0-d
tensors, NaN, +inf and -inf entries and fully masked rows (issue 28): every backend
agrees with the reference, and where a row's input is valid (finite or -inf, at least
one finite) the output is a distribution; a fully masked row is zeros; a row with NaN
or +inf is NaN, as softmax makes it."""

import random

import pytest
import torch

from fairseq_sparse.entmax import entmax15, entmax_alpha, has_triton_kernel, sparsemax, use_backend
from fairseq_sparse.entmax.activations import row_kernels

BACKENDS = ["cpp"] + (["triton"] if has_triton_kernel() and (torch.cuda.is_available()
                                                             or row_kernels.INTERPRET) else [])
TOLERANCE = {torch.float64: 1e-9, torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def random_case(rng):
    ndim = rng.choice([0, 1, 2, 3])
    shape = tuple(rng.choice([0, 1, 2, 3, 5, 9]) if rng.random() < 0.15 else rng.randint(1, 9) for _ in range(ndim))
    dtype = rng.choice(list(TOLERANCE))
    x = torch.randn(shape, dtype=torch.float64) * rng.choice([0.1, 1.0, 5.0])
    if x.numel():
        flat = x.view(-1)
        for _ in range(rng.randint(0, 3)):
            flat[rng.randrange(flat.numel())] = rng.choice([float("nan"), float("inf"), float("-inf")])
    dim = rng.randrange(-max(ndim, 1), max(ndim, 1))
    if ndim and x.numel() and rng.random() < 0.3:  # a fully masked row: the first along dim
        x.movedim(dim, -1)[(0,) * (ndim - 1)] = float("-inf")
    name = rng.choice(["sparsemax", "entmax15", "alpha_entmax"])
    alpha = None
    if name == "alpha_entmax":
        if rng.random() < 0.5 or ndim == 0:
            alpha = rng.uniform(1.01, 2.0)
        else:
            alpha_shape = [1 if d == dim % ndim else (s if rng.random() < 0.5 else 1) for d, s in enumerate(shape)]
            alpha = torch.empty(alpha_shape, dtype=torch.float64).uniform_(1.01, 2.0)
    return x.to(dtype), dim, name, alpha


def normalize(name, x, dim, alpha):
    if name == "sparsemax":
        return sparsemax(x, dim)
    if name == "entmax15":
        return entmax15(x, dim)
    return entmax_alpha(x, alpha.to(x.dtype) if torch.is_tensor(alpha) else alpha, dim)


@pytest.mark.parametrize("seed", range(8))
def test_every_backend_agrees_with_the_reference_and_returns_distributions(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    for _ in range(40):
        x, dim, name, alpha = random_case(rng)
        with use_backend("torch"):
            want = normalize(name, x, dim, alpha)
        assert want.shape == x.shape and want.dtype == x.dtype
        if x.dim() == 0:
            assert want.isnan().item() == (x.isnan() | x.isposinf()).item() or want.item() == 1.0
            continue
        if x.numel() == 0:
            continue
        xd, wd = x.double().movedim(dim, -1), want.double().movedim(dim, -1)
        invalid = (xd.isnan() | xd.isposinf()).any(-1)
        masked = ~invalid & xd.isneginf().all(-1)
        valid = ~invalid & ~masked
        assert wd[invalid].isnan().all() and (wd[masked] == 0).all()
        if valid.any():
            rows = wd[valid]
            assert (rows >= 0).all() and torch.allclose(rows.sum(-1), torch.ones_like(rows[..., 0]),
                                                        atol=max(TOLERANCE[x.dtype], 1e-6) * x.shape[dim] + 1e-3
                                                        * (x.dtype in (torch.float16, torch.bfloat16)))
            assert (rows[xd[valid].isneginf()] == 0).all(), "masked entries get exactly zero"
        for backend in BACKENDS:
            with use_backend(backend):
                got = normalize(name, x, dim, alpha)
            gd = got.double().movedim(dim, -1)
            assert torch.equal(gd.isnan(), wd.isnan()), (backend, name, x.shape, dim)
            torch.testing.assert_close(gd.nan_to_num(), wd.nan_to_num(), atol=TOLERANCE[x.dtype], rtol=0,
                                       msg=lambda m: f"{backend} {name} {tuple(x.shape)} dim {dim} {x.dtype}: {m}")
