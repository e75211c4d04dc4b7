"""Label-smoothed entmax losses for sparse output layers.

The Fenchel-Young loss of Tsallis alpha-entmax (Blondel, Martins & Niculae,
AISTATS 2019; used for sparse sequence-to-sequence models by Peters, Niculae &
Martins, ACL 2019) against a smoothed target q = (1 - eps) e_y + eps / V:

    L(z; q) = (p - q) . z + H_alpha(p) - H_alpha(q),   p = alpha-entmax(z),
    H_alpha(p) = (1 - sum_j p_j^alpha) / (alpha (alpha - 1))   (Tsallis entropy),

with gradient dL/dz = p - q.  L >= 0, and L = 0 exactly when p = q.  With
eps = 0 and alpha = 2 this is the sparsemax loss (Martins & Astudillo, 2016).
"""

import torch
from torch.autograd import Function

from .normalizers import fixed_alpha_normalizer


def _tsallis_entropy_of_smoothed_target(alpha, eps, vocab):
    on, off = 1.0 - eps + eps / vocab, eps / vocab
    return (1.0 - on ** alpha - (vocab - 1) * off ** alpha) / (alpha * (alpha - 1.0))


class EntmaxLossFunction(Function):
    """Per-row loss for scores z (N, V) and targets (N,) under a registered sparse
    normaliser of fixed alpha (sparsemax, entmax15).
    Also returns the support size of each row of p (not differentiable), which
    callers log without normalising the scores a second time."""

    @staticmethod
    def forward(ctx, z, target, normalizer, eps):
        alpha = normalizer.alpha
        p = normalizer(z, dim=-1)
        vocab = z.size(-1)
        q_dot_z = (1.0 - eps) * z.gather(-1, target.unsqueeze(-1)).squeeze(-1) + (eps / vocab) * z.sum(-1)
        entropy = (1.0 - p.pow(alpha).sum(-1)) / (alpha * (alpha - 1.0))
        loss = (p * z).sum(-1) - q_dot_z + entropy - _tsallis_entropy_of_smoothed_target(alpha, eps, vocab)
        ctx.save_for_backward(p, target)
        ctx.eps = eps
        support = (p > 0).sum(-1)
        ctx.mark_non_differentiable(support)
        return loss.clamp_min(0.0), support  # loss >= 0 in exact arithmetic; rounding may leave -1e-7

    @staticmethod
    def backward(ctx, grad, _support_grad):
        if torch.is_grad_enabled():
            raise RuntimeError("entmax_loss has no double backward (torch.autograd.grad(..., create_graph=True)): its "
                               "gradient would have no history and the second-order term would be silently dropped")
        p, target = ctx.saved_tensors
        eps, vocab = ctx.eps, p.size(-1)
        dz = p - eps / vocab
        dz.scatter_add_(-1, target.unsqueeze(-1), torch.full_like(dz[:, :1], -(1.0 - eps)))
        return dz * grad.unsqueeze(-1), None, None, None


def entmax_loss(z, target, alpha, label_smoothing=0.0, return_support=False):
    """Loss per row of ``z`` (N, V) against integer ``target`` (N,), for the alpha of a
    registered sparse normaliser (1.5: entmax15, 2: sparsemax; any other is an error);
    with ``return_support``, also the number of nonzero probabilities per row."""
    normalizer = fixed_alpha_normalizer(alpha)
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label smoothing must lie in [0, 1), got {label_smoothing}")
    loss, support = EntmaxLossFunction.apply(z, target, normalizer, float(label_smoothing))
    return (loss, support) if return_support else loss
