"""Pure-PyTorch alpha-entmax kernels: the portable path and the oracle for the C++ one.

Both work on rows along the last dimension of a contiguous 2-D view and take one
alpha per row.  They are kept deliberately plain: every step is a tensor op, so
they run on any device and any float dtype, and the fused C++ kernel
(``csrc/entmax_cpu.cpp``) is tested against them.

Notation (Peters et al., 2019; Correia et al., 2019): for a row x and alpha in (1, 2],

    entmax_alpha(x)_i = [(alpha - 1) x_i - tau]_+ ^ (1 / (alpha - 1)),

with tau the unique threshold making the row sum to one.  We shift the scaled
scores so that the row maximum sits at 1, z_i = (alpha - 1)(x_i - max x) + 1;
then tau lies in [0, 1) and every z_i - tau is at most 1, so no power overflows.
"""

import math

import torch

MAX_NEWTON_ITER = 100


def newton_tol(dtype):
    """Stop once a Newton step is this small: Newton converges quadratically near
    the root, so the step just taken leaves an error of about its square."""
    return torch.finfo(dtype).eps ** 0.75


def shifted_scores(x, alpha):
    """z = (alpha - 1)(x - max x) + 1 per row; rows that are all -inf get max 0."""
    row_max = x.max(dim=-1, keepdim=True).values
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    return (alpha - 1) * (x - row_max) + 1


def threshold(z, alpha):
    """The tau solving sum_i [z_i - tau]_+^(1/(alpha-1)) = 1 for each row of z.

    We apply Newton's method to h(tau) = ||[z - tau]_+||_k - 1 with k = 1/(alpha-1)
    >= 1, rather than to the k-th power of that norm: h is convex (a monotone norm
    of convex functions) and decreasing, and h(0) >= 0 because max z = 1, so Newton
    from that lower bracket increases tau monotonically onto the root and never
    overshoots.  Unlike the power, h is exactly linear while the support does not
    change and all its entries are equal, so the iteration count does not grow as
    alpha approaches 1 (the power behaves like exp(-k tau) there); for sparsemax
    (k = 1) the two coincide and Newton is exact once the support is found.
    Rows with no finite entry get tau = 0 (their output is all zeros).
    """
    tol = newton_tol(z.dtype)
    tau = torch.zeros_like(z[..., :1])
    for tau, step in _newton_iterates(z, alpha):
        if step.abs().max() <= tol:
            break
    return tau


def newton_steps(z, alpha, tol):
    """The Newton steps of :func:`threshold` each row of ``z`` takes until its own step is
    within ``tol``: what a solver starting from tau = 0 pays, row by row (the fused kernel's
    tests and ``benchmarks/bench_attention_passes.py`` count its passes against it)."""
    steps = torch.zeros(z.shape[:-1], dtype=torch.long, device=z.device)
    moving = z.max(dim=-1).values > 0
    for _, step in _newton_iterates(z, alpha):
        steps += moving.long()
        moving &= step.squeeze(-1).abs() > tol
        if not moving.any():
            break
    return steps


def _newton_iterates(z, alpha):
    """Newton's (tau, step) from tau = 0, at most MAX_NEWTON_ITER of them (see :func:`threshold`)."""
    k = 1.0 / (alpha - 1)
    tau = torch.zeros_like(z[..., :1])
    live = z.max(dim=-1, keepdim=True).values > 0
    tiny = torch.finfo(z.dtype).tiny
    for _ in range(MAX_NEWTON_ITER):
        gap = (z - tau).clamp_min(0)
        gap_km1 = torch.where(gap > 0, gap.pow(k - 1), torch.zeros_like(gap))
        power = (gap_km1 * gap).sum(-1, keepdim=True).clamp_min(tiny)
        norm = power.pow(1 / k)
        # -h'(tau) = ||gap||_k^(1-k) * sum gap^(k-1)
        slope = (norm / power) * gap_km1.sum(-1, keepdim=True)
        step = torch.where(live, (norm - 1) / slope.clamp_min(tiny), torch.zeros_like(norm))
        tau = tau + step
        yield tau, step


def polish_threshold(z, tau, alpha):
    """Exact tau on the support found by Newton, for sparsemax and 1.5-entmax.

    On a fixed support S the equation is linear (alpha = 2):
        tau = (sum_S z - 1) / |S|,
    or quadratic (alpha = 1.5): sum_S (z_i - tau)^2 = 1, whose lower root is
        tau = mean_S z - sqrt(1/|S| - var_S z).
    """
    on = z > tau
    n = on.sum(-1, keepdim=True).clamp_min(1).to(z.dtype)
    mean = torch.where(on, z, 0).sum(-1, keepdim=True) / n
    if alpha == 2:
        exact = mean - 1 / n
    else:
        var = torch.where(on, z - mean, 0).pow(2).sum(-1, keepdim=True) / n
        exact = mean - (1 / n - var).clamp_min(0).sqrt()
    # A row with no finite entry gets some finite tau here; its output is still all zeros.
    return exact


def forward(x, alpha):
    """alpha-entmax of each row of ``x`` (shape (rows, d)); ``alpha`` is (rows, 1) or a float."""
    z = shifted_scores(x, alpha)
    tau = threshold(z, alpha)
    if isinstance(alpha, float) and alpha in (1.5, 2.0):
        tau = polish_threshold(z, tau, alpha)
    gap = (z - tau).clamp_min(0)
    return gap.pow(1.0 / (alpha - 1))


def exp_remainder(w):
    """phi(w) = exp(-w) - 1 + w >= 0, accurate also where it is tiny: in float64
    expm1(-w) + w (relative error ~1e-16 / |w|); in float32, for |w| < 1/2, its Taylor
    series w^2 (1/2! - w/3! + ... + w^6/8!) (truncation below float32's precision),
    else directly."""
    if w.dtype == torch.float64:
        return torch.expm1(-w) + w
    series = torch.full_like(w, 1.0 / math.factorial(8))
    for k in range(7, 1, -1):
        series = 1.0 / math.factorial(k) - w * series
    return torch.where(w.abs() < 0.5, w * w * series, torch.exp(-w) - 1 + w)


def alpha_gradient(y, dy, alpha):
    """dy . d entmax_alpha(x) / d alpha per row (Correia et al., 2019, Prop. 1), in a form
    that stays accurate in float32 as alpha -> 1.

    Prop. 1 reads, with delta = alpha - 1, g = y^(2-alpha) on the support, p~ = g / sum g
    and H = sum y log y:  dy.(y - p~)/delta^2 - dy.(y log y - p~ H)/delta.  Both terms
    grow like 1/delta while their sum stays finite, and y - p~ is itself a difference of
    nearly equal numbers, so in float32 the error grows like eps/delta^2 (relative error
    6.5 at alpha = 1.001).  Writing L = log y, mu = sum y L (= H), u = L - mu,
    c = log sum y exp(-delta u) = log1p(sum y phi(delta u)) and w = delta u + c, one has
    p~ = y exp(-w) exactly, and the two terms combine to

        sum_i dy_i y_i [ (c - phi(w_i)) / delta^2 + mu (phi(w_i) - w_i) / delta ],

    phi(w) = exp(-w) - 1 + w, whose parts are each O(1), computed without cancellation
    (phi by its series where small).  Its limit at alpha -> 1 is
    -sum dy y ((u^2 - var u)/2 + mu u)."""
    on = y > 0
    total = y.sum(-1, keepdim=True)
    yhat = torch.where(on, y / total.clamp_min(torch.finfo(y.dtype).tiny), torch.zeros_like(y))
    log_y = torch.where(on, torch.log(torch.where(on, y, torch.ones_like(y))), torch.zeros_like(y))
    mu = (yhat * log_y).sum(-1, keepdim=True)
    delta = alpha - 1
    u = torch.where(on, log_y - mu, torch.zeros_like(y))
    c = torch.log1p((yhat * exp_remainder(delta * u)).sum(-1, keepdim=True))
    w = delta * u + c
    phi_w = exp_remainder(w)
    terms = (c - phi_w) / delta**2 + mu * (phi_w - w) / delta
    return (dy * yhat * torch.where(on, terms, torch.zeros_like(terms))).sum(-1, keepdim=True)


def backward(y, dy, alpha, alpha_grad):
    """Gradients of entmax_alpha with respect to x and (per row) alpha.

    With g_i = y_i^(2 - alpha) on the support and 0 elsewhere (Peters et al., 2019):
        dx = g * dy - g * (sum_j g_j dy_j) / sum_j g_j.
    With respect to alpha: :func:`alpha_gradient`.
    """
    on = y > 0
    # y^(2-alpha) of 1 off the support, then 0: the power's derivative at y = 0 is infinite,
    # and a gradient taken through this backward (create_graph) must not meet it.
    g = torch.where(on, torch.where(on, y, torch.ones_like(y)).pow(2 - alpha), torch.zeros_like(y))
    g_sum = g.sum(-1, keepdim=True)
    g_sum_safe = g_sum.clamp_min(torch.finfo(y.dtype).tiny)
    gdy = g * dy
    dx = gdy - g * (gdy.sum(-1, keepdim=True) / g_sum_safe)
    if not alpha_grad:
        return dx, None
    return dx, alpha_gradient(y, dy, alpha)
