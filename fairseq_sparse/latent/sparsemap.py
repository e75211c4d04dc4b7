"""SparseMAP over bit-vectors, by the active-set method, with its backward pass.

Niculae, Martins, Blondel & Cardie, "SparseMAP: Differentiable Sparse Structured
Inference" (ICML 2018), used as a latent distribution by Correia et al.
(NeurIPS 2020, Sec. 4).  For structures z (the columns of M) with scores
theta . z, SparseMAP is

    p* = argmin_{p in simplex}  1/2 ||M p||^2 - theta . M p,

whose marginals mu = M p* are the Euclidean projection of theta onto the
marginal polytope conv(M).  The active-set method (Nocedal & Wright, Alg. 16.3;
SparseMAP paper, Alg. 2) needs only a MAP oracle: it keeps a small set S of
structures, solves the equality-constrained QP on S in closed form (its KKT
system), drops structures whose weight would turn negative, and adds the
oracle's answer to argmax_z (theta - mu) . z until no structure improves the
objective.  The answer is a distribution over at most D + 1 structures.

Backward (SparseMAP paper, Prop. 1): on the final active set,
dp/dtheta = A M_S^T with A the top-left block of the inverse KKT matrix
[[M_S^T M_S, 1], [1^T, 0]]^{-1}; so for an upstream gradient g over S,
grad_theta = M_S u with [u; v] solving that KKT system with right side [g; 0].
"""

import torch


def _kkt_solve(structures, rhs_top, rhs_bottom):
    """Solve [[Z Z^T, 1], [1^T, 0]] [x; t] = [rhs_top; rhs_bottom] for the rows Z of
    ``structures``; least squares when the system is singular (affinely dependent rows)."""
    n = structures.shape[0]
    kkt = structures.new_zeros(n + 1, n + 1)
    kkt[:n, :n] = structures @ structures.T
    kkt[:n, n] = 1
    kkt[n, :n] = 1
    rhs = torch.cat([rhs_top, rhs_top.new_tensor([rhs_bottom])])
    solution, info = torch.linalg.solve_ex(kkt, rhs)
    if int(info) != 0 or not torch.isfinite(solution).all():
        solution = torch.linalg.lstsq(kkt, rhs[:, None]).solution[:, 0]
    return solution[:n]


def active_set(theta, oracle, max_iter=200, tol=1e-10):
    """SparseMAP for one score vector ``theta`` (D,), in float64.

    Returns (structures (S, D), probabilities (S,)) with every probability > 0."""
    structures = oracle(theta)[None]
    p = theta.new_ones(1)
    for _ in range(max_iter):
        mu = p @ structures
        direction = theta - mu
        candidate = oracle(direction)
        if float(direction @ (candidate - mu)) <= tol * max(1.0, float(direction.abs().sum())):
            break
        if (structures == candidate).all(-1).any():
            break  # the oracle returned a structure already in S: converged up to round-off
        structures = torch.cat([structures, candidate[None]])
        p = torch.cat([p, p.new_zeros(1)])
        while True:
            target = _kkt_solve(structures, structures @ theta, 1.0)
            if bool((target > tol).all()):
                p = target
                break
            # Walk from p towards the QP's solution on S until the first weight hits
            # zero, drop the structures at zero and solve again on the smaller set.
            falling = target < p
            steps = torch.where(falling, p / (p - target).clamp_min(1e-300), torch.full_like(p, 2.0))
            step = min(1.0, float(steps.min()))
            p = p + step * (target - p)
            keep = p > tol
            if bool(keep.all()):  # target >= 0 only up to tol: accept it clipped
                p = target.clamp_min(0)
                keep = p > tol
            structures, p = structures[keep], p[keep] / p[keep].sum()
    return structures, p


class SparseMAPFunction(torch.autograd.Function):
    """Batched SparseMAP: (scores (B, D), oracle) -> (probabilities (B, S), structures (B, S, D)).

    Rows with fewer than S structures are padded with probability 0 (and an all-zero
    structure that is never decoded).  Only the probabilities are differentiable."""

    @staticmethod
    def forward(ctx, scores, oracle):
        rows = [active_set(theta, oracle) for theta in scores.detach().to(torch.float64)]
        width = max(len(p) for _, p in rows)
        probs = scores.new_zeros(scores.shape[0], width, dtype=torch.float64)
        structures = scores.new_zeros(scores.shape[0], width, scores.shape[1], dtype=torch.float64)
        for b, (z, p) in enumerate(rows):
            probs[b, :len(p)] = p
            structures[b, :len(p)] = z
        ctx.save_for_backward(probs, structures)
        ctx.mark_non_differentiable(structures)
        return probs.to(scores.dtype), structures.to(scores.dtype)

    @staticmethod
    def backward(ctx, grad_probs, grad_structures):
        probs, structures = ctx.saved_tensors
        grad = torch.zeros(structures.shape[0], structures.shape[2], dtype=torch.float64, device=probs.device)
        for b in range(probs.shape[0]):
            active = probs[b] > 0
            z = structures[b, active]
            u = _kkt_solve(z, grad_probs[b, active].to(torch.float64), 0.0)
            grad[b] = u @ z
        return grad.to(grad_probs.dtype), None


def bit_scores(scores, bit_states):
    """The scores SparseMAP over the bits is taken at: ``scores`` with one state per bit,
    (scores + 1) / 2 with the paper's two (see :func:`sparsemap`)."""
    if bit_states not in (1, 2):
        raise ValueError(f"bit_states {bit_states}: must be 1 or 2")
    return scores if bit_states == 1 else (scores + 1) / 2


def sparsemap(scores, space, bit_states=1):
    """SparseMAP distribution over the bit-vectors of ``space`` (a :class:`BitVector`,
    its budget respected): (probabilities (B, S), structures (B, S, D)).

    ``bit_states=2`` is the factor of the paper's code (lp-sparsemap's Bernoulli and
    budget factors): each bit is a pair of states, the structure [z, 1 - z] with scores
    [theta, 0], so the quadratic term is 1/2 (||mu||^2 + ||1 - mu||^2).  As
    1 - M p = 1 - mu for p on the simplex, its objective is
    2 [((theta + 1) / 2) . mu - 1/2 ||mu||^2] minus a constant: SparseMAP over the bits at
    scores (theta + 1) / 2, the same p.  Its marginals are fractional for scores in
    (-1, 1) rather than (0, 1) (without a budget mu = clip((theta + 1) / 2, 0, 1))."""
    return SparseMAPFunction.apply(bit_scores(scores, bit_states), space.map)
