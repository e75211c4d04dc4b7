"""The row-wise kernels: alpha-entmax of each row of a matrix, one alpha per row.

The same algorithm as the pure-PyTorch reference (``reference.py``), fused so that a
row is read once, solved in registers and written once, instead of one kernel
launch and one pass over memory per tensor op per Newton step:

    z_i = (alpha - 1)(x_i - max x) + 1,                       tau in [0, 1),
    Newton on h(tau) = ||[z - tau]_+||_k - 1, k = 1 / (alpha - 1), from tau = 0,
    entmax_alpha(x)_i = [z_i - tau]_+^k

(Peters, Niculae & Martins, 2019; Correia, Niculae & Martins, 2019).  h is convex and
decreasing with h(0) >= 0, so Newton climbs monotonically onto the root; for
sparsemax and 1.5-entmax the threshold is then made exact on the support found.
The backward pass is the closed form of ``reference.backward`` (gradients in x and,
per row, in alpha; Correia et al. 2019, Prop. 1).

Inputs may be float32, float16 or bfloat16: a row is computed in float32 and the
output is stored in the input's dtype (as softmax does), which saves the casts and
the float32 copies an unfused path would make.  Rows longer than ``MAX_ROW`` are
left to the reference.

With ``TRITON_INTERPRET=1`` set before the package is imported (``config.INTERPRET``),
Triton runs the kernels on CPU tensors through numpy: slow, but exactly the kernels' code,
so a machine without a GPU (CI) tests them at small shapes under ``use_backend("triton")``.
"""

import torch
import triton
import triton.language as tl

from ..reference import MAX_NEWTON_ITER, newton_tol
from .config import INTERPRET, TINY, fixed_kind
from .threshold import exp_remainder

MAX_ROW = 65536
LN2 = tl.constexpr(0.6931471805599453)


def supports(x2):
    """Rows this kernel takes: on CUDA, or on CPU under Triton's interpreter."""
    return (x2.is_cuda or (INTERPRET and x2.device.type == "cpu")) \
        and x2.dtype in (torch.float32, torch.float16, torch.bfloat16) and 0 < x2.shape[-1] <= MAX_ROW


def _alpha_per_row(alpha, rows, device):
    if isinstance(alpha, float):
        return torch.full((rows,), alpha, dtype=torch.float32, device=device)
    return alpha.reshape(-1).to(torch.float32).contiguous()


def _launch_config(d):
    block = triton.next_power_of_2(d)
    # Enough threads that a row sits in registers at a few values per thread.
    num_warps = 4 if block <= 1024 else 8 if block <= 4096 else 16
    return block, num_warps


@triton.jit
def _forward_kernel(x_ptr, alpha_ptr, y_ptr, d, stride_x, stride_y, tol, max_iter,
                    FIXED: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < d
    x = tl.load(x_ptr + row * stride_x + cols, mask=inside, other=float("-inf")).to(tl.float32)
    alpha = tl.load(alpha_ptr + row)
    am1 = alpha - 1.0
    k = 1.0 / am1

    row_max = tl.max(x, axis=0)
    row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    z = am1 * (x - row_max) + 1.0
    # A row with no finite score keeps tau = 0, hence all zeros.
    live = tl.max(z, axis=0) > 0.0

    tau = am1 * 0.0
    step = am1 * 0.0 + 1.0
    it = 0
    while (it < max_iter) & (tl.abs(step) > tol):
        gap = tl.maximum(z - tau, 0.0)
        on = gap > 0.0
        gap_km1 = tl.where(on, tl.exp2((k - 1.0) * tl.log2(tl.where(on, gap, 1.0))), 0.0)
        power = tl.maximum(tl.sum(gap_km1 * gap, axis=0), TINY)
        norm = tl.exp2(tl.log2(power) * am1)  # ||gap||_k = power^(1/k)
        slope = norm / power * tl.sum(gap_km1, axis=0)  # -h'(tau)
        step = tl.where(live, (norm - 1.0) / tl.maximum(slope, TINY), 0.0)
        tau += step
        it += 1

    if FIXED != 0:
        # Exact threshold on the support Newton found (see reference.polish_threshold).
        on = z > tau
        n = tl.maximum(tl.sum(on.to(tl.float32), axis=0), 1.0)
        mean = tl.sum(tl.where(on, z, 0.0), axis=0) / n
        if FIXED == 1:
            tau = mean - 1.0 / n
        else:
            centred = tl.where(on, z - mean, 0.0)
            var = tl.sum(centred * centred, axis=0) / n
            tau = mean - tl.sqrt(tl.maximum(1.0 / n - var, 0.0))

    gap = tl.maximum(z - tau, 0.0)
    if FIXED == 1:
        y = gap
    elif FIXED == 2:
        y = gap * gap
    else:
        y = tl.where(gap > 0.0, tl.exp2(k * tl.log2(tl.where(gap > 0.0, gap, 1.0))), 0.0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _backward_kernel(y_ptr, dy_ptr, alpha_ptr, dx_ptr, dalpha_ptr, d, stride_y, stride_dy, stride_dx,
                     ALPHA_GRAD: tl.constexpr, FIXED: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < d
    y = tl.load(y_ptr + row * stride_y + cols, mask=inside, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dy + cols, mask=inside, other=0.0).to(tl.float32)
    alpha = tl.load(alpha_ptr + row)
    on = y > 0.0
    log2_y = tl.log2(tl.where(on, y, 1.0))
    # g = y^(2 - alpha) on the support: the diagonal of the Jacobian's first term.
    if FIXED == 1:
        g = on.to(tl.float32)
    elif FIXED == 2:
        g = tl.sqrt(y)
    else:
        g = tl.where(on, tl.exp2((2.0 - alpha) * log2_y), 0.0)
    g_sum = tl.maximum(tl.sum(g, axis=0), TINY)
    gdy = g * dy
    dx = gdy - g * (tl.sum(gdy, axis=0) / g_sum)
    tl.store(dx_ptr + row * stride_dx + cols, dx.to(dx_ptr.dtype.element_ty), mask=inside)
    if ALPHA_GRAD:
        # reference.alpha_gradient's form, accurate in float32 as alpha -> 1.
        yhat = y / tl.maximum(tl.sum(y, axis=0), TINY)
        log_y = log2_y * LN2
        mu = tl.sum(yhat * log_y, axis=0)
        delta = alpha - 1.0
        u = tl.where(on, log_y - mu, 0.0)
        s = tl.sum(yhat * exp_remainder(delta * u), axis=0)
        # log1p(s): its series where 1 + s would round (s >= 0).
        c = tl.where(s < 1e-3, s * (1.0 - s * (0.5 - s * (1.0 / 3.0 - s * 0.25))), tl.log(1.0 + s))
        w = delta * u + c
        phi_w = exp_remainder(w)
        terms = tl.where(on, (c - phi_w) / (delta * delta) + mu * (phi_w - w) / delta, 0.0)
        tl.store(dalpha_ptr + row, tl.sum(dy * yhat * terms, axis=0))


def forward(x2, alpha):
    """alpha-entmax of each row of the CUDA matrix ``x2``; ``alpha`` a float or (rows, 1)."""
    rows, d = x2.shape
    y2 = torch.empty_like(x2)
    if rows == 0:
        return y2
    block, num_warps = _launch_config(d)
    _forward_kernel[(rows,)](
        x2, _alpha_per_row(alpha, rows, x2.device), y2, d, x2.stride(0), y2.stride(0),
        newton_tol(torch.float32), MAX_NEWTON_ITER, FIXED=fixed_kind(alpha), BLOCK=block, num_warps=num_warps)
    return y2


def backward(y2, dy2, alpha, alpha_grad):
    """(dx, dalpha per row or None), as ``reference.backward``."""
    rows, d = y2.shape
    dy2 = dy2.contiguous()
    dx2 = torch.empty_like(dy2)
    dalpha = torch.empty((rows, 1), dtype=torch.float32, device=y2.device) if alpha_grad else dx2
    if rows > 0:
        block, num_warps = _launch_config(d)
        _backward_kernel[(rows,)](
            y2, dy2, _alpha_per_row(alpha, rows, y2.device), dx2, dalpha, d,
            y2.stride(0), dy2.stride(0), dx2.stride(0),
            ALPHA_GRAD=alpha_grad, FIXED=fixed_kind(alpha), BLOCK=block, num_warps=num_warps)
    return dx2, (dalpha if alpha_grad else None)
