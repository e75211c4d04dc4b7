"""Length-scaled attention: each query multiplied by a factor that grows with the number n
of keys it may see, so that the normaliser's scores keep their spread as the context grows
(softmax otherwise disperses its mass over more keys the longer the context).

- ``none``: no scale.
- ``log``: ``s_h log(n + 1)``, one learned ``s_h`` per head, started at 1 (scalable
  softmax: Nakanishi, "Scalable-Softmax Is Superior for Attention", 2025).
- ``adaptive``: ``delta + beta log(n + 1)^gamma`` with delta = 1 and beta, gamma predicted
  per token and head from the layer input, ``beta = softplus(W_b x + b_b)``,
  ``gamma = 2 tanh(W_g x + b_g)`` (ASEntmax: Vasylenko, Pitorro, Martins & Treviso,
  "Long-Context Generalization with Sparse Attention", ICLR 2026).  W_b, W_g and b_g start
  at zero and b_b at ``softplus^-1(ADAPTIVE_BETA_START)``, so that the factor starts within
  ``ADAPTIVE_BETA_START`` of 1 at every length: a near-identity start, which lets a model
  first learn its task unscaled.
- ``adaptive_paper``: the same factor started as ASEntmax's own code starts it: W_b and W_g
  at ``nn.Linear``'s default (uniform within 1/sqrt(embed_dim)), the biases at zero, so that
  beta starts near softplus(0) = 0.69 and gamma varies by token: the factor depends on n
  from the first update.  Training lengths alone give a model little reason to grow beta
  from the near-identity start; this start has it depend on n before the task is learned.

log(n + 1) as in ASEntmax's own code: the first query's factor is finite and nonzero.
n is counted by :func:`~.masks.keys_seen` from the attention's masks: the
query's position plus one under causal attention (cached keys and packed sequences
included), the sequence's unpadded length otherwise.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

LENGTH_SCALES = ("none", "log", "adaptive", "adaptive_paper")
ADAPTIVE_BETA_START = 1e-3
# gamma = GAMMA_RANGE tanh(.), as ASEntmax bounds it.
GAMMA_RANGE = 2.0


def check_length_scale(form, option="--length-scale"):
    if form not in LENGTH_SCALES:
        raise ValueError(f"{option} {form!r}: one of {', '.join(LENGTH_SCALES)}")
    return form


class LengthScale(nn.Module):
    """The query factor of ``form`` for ``heads`` heads, on the heads ``scaled`` (a (heads,)
    bool mask; None: all), the others keeping factor 1.  ``embed_dim``: the layer input's
    width, which the adaptive forms predict beta and gamma from.

    ``forward(seen, x)``: ``seen`` (B or 1, Tq) keys each query sees, ``x`` (B, Tq, E) the
    layer input (the adaptive forms only) -> the factor (B or 1, H, Tq, 1), float32.
    """

    def __init__(self, form, heads, embed_dim=None, scaled=None):
        super().__init__()
        self.form = check_length_scale(form)
        if form == "none":
            raise ValueError("LengthScale: 'none' builds no module")
        scaled = torch.ones(heads, dtype=torch.bool) if scaled is None else torch.as_tensor(scaled, dtype=torch.bool)
        if scaled.shape != (heads,) or not bool(scaled.any()):
            raise ValueError(f"LengthScale: scaled must be a (heads={heads},) bool mask with a head in it")
        self.heads = heads
        # Which heads are scaled, in order: the factor's rows go to these heads (a Python tuple,
        # not a buffer: a model built on the meta device, as transformers loads, keeps it).
        self.scaled_heads = tuple(int(h) for h in scaled.nonzero().flatten())
        count = len(self.scaled_heads)
        if form == "log":
            self.weight = nn.Parameter(torch.ones(count))
        else:
            if embed_dim is None:
                raise ValueError(f"LengthScale({form!r}) predicts from the layer input: give embed_dim")
            self.beta = nn.Linear(embed_dim, count)
            self.gamma = nn.Linear(embed_dim, count)
            self.reset_parameters()

    @property
    def reads_input(self):
        """Whether ``forward`` needs the layer input ``x`` (the adaptive forms)."""
        return self.form != "log"

    def reset_parameters(self):
        if self.form == "log":
            nn.init.ones_(self.weight)
            return
        for layer in (self.beta, self.gamma):
            if self.form == "adaptive":
                nn.init.zeros_(layer.weight)
            else:
                layer.reset_parameters()
            nn.init.zeros_(layer.bias)
        if self.form == "adaptive":
            nn.init.constant_(self.beta.bias, math.log(math.expm1(ADAPTIVE_BETA_START)))

    def forward(self, seen, x=None):
        log_n = torch.log1p(seen.float().clamp(min=1))[:, None, :, None]  # (B, 1, Tq, 1)
        if self.form == "log":
            factor = self.weight.float()[None, :, None, None] * log_n
        else:
            if x is None:
                raise ValueError(f"LengthScale({self.form!r}) needs the layer input x")
            beta = F.softplus(self.beta(x).float()).transpose(1, 2)[..., None]  # (B, S, Tq, 1)
            gamma = GAMMA_RANGE * torch.tanh(self.gamma(x).float()).transpose(1, 2)[..., None]
            factor = 1.0 + beta * log_n ** gamma
        batch = factor.shape[0]
        if len(self.scaled_heads) == self.heads:
            return factor
        full = torch.ones(batch, self.heads, factor.shape[2], 1, device=factor.device, dtype=factor.dtype)
        index = torch.tensor(self.scaled_heads, device=factor.device)
        return full.index_copy(1, index, factor.expand(batch, -1, -1, -1))

    def extra_repr(self):
        return f"{self.form}, heads={list(self.scaled_heads)}"
