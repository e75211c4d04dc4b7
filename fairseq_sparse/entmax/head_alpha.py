"""The learnable entmax alpha of each attention head: the one alpha parametrisation, and the
schedule that raises its floor to convert a softmax-trained model to sparse heads."""

import operator
from dataclasses import asdict, dataclass

import torch
from torch import nn

# The lower bound of a learned alpha unless --alpha-min says otherwise (see HeadAlpha).
ALPHA_MIN = 1.01


def parse_alpha_init(value):
    """``"random"`` or a number, as given to ``--alpha-init``; raises a ValueError naming the option."""
    if isinstance(value, str) and value.strip().lower() == "random":
        return "random"
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"--alpha-init must be a number in (alpha_min, 2) or 'random', got {value!r}") from None


@dataclass(frozen=True)
class AlphaFloor:
    """The conversion recipe: a head's lowest alpha rises linearly from ``alpha_min`` to
    ``target`` over the first ``updates`` updates, then stays there.

    A softmax-pretrained model starts its heads near alpha = 1 (its own behaviour) and is
    moved towards sparsity while its weights adapt, instead of being switched at once,
    which the pretrained weights were not trained for.  The floor enters the
    parametrisation (:class:`HeadAlpha`: alpha = floor + (2 - floor) sigmoid(a)), so each
    head keeps its own learned place above it and its gradient; a head may learn to be
    sparser than the floor, never denser.
    """

    target: float = 1.5
    updates: int = 500

    def __post_init__(self):
        # Python, numpy and torch numbers alike, kept as Python ones (saved in configs as JSON).
        try:
            target = None if isinstance(self.target, (bool, str)) else float(self.target)
        except (TypeError, ValueError):
            target = None
        if target is None or not 1.0 < target < 2.0:
            raise ValueError(f"--alpha-floor must lie in (1, 2) (the alpha every head reaches at least), "
                             f"got {self.target!r}")
        try:
            updates = None if isinstance(self.updates, (bool, float)) else operator.index(self.updates)
        except TypeError:
            updates = None
        if updates is None or updates < 0:
            raise ValueError(f"--alpha-floor-updates must be a whole number of updates >= 0, got {self.updates!r}")
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "updates", updates)

    def at(self, update, alpha_min=ALPHA_MIN):
        """The floor after ``update`` updates."""
        if update >= self.updates:
            return float(self.target)
        return alpha_min + (self.target - alpha_min) * max(update, 0) / self.updates

    def to_dict(self):
        return asdict(self)


class HeadAlpha(nn.Module):
    """One alpha per head, alpha = floor + (2 - floor) * sigmoid(a), the floor alpha_min
    unless an :class:`AlphaFloor` schedule raises it.

    With ``alpha_min = 1`` this is exactly the parametrisation of Correia,
    Niculae & Martins (EMNLP 2019), alpha = 1 + sigmoid(a) in (1, 2).  A lower
    bound such as 1.01 is applied by rescaling rather than clamping, so that a
    head near the bound keeps a gradient (a clamp would freeze it there), and it
    keeps alpha away from 1, where entmax's exponent 1/(alpha - 1) explodes.

    ``init`` is a number in (alpha_min, 2) for every head, or ``"random"``:
    uniform in (alpha_min, 2) per head, from torch's generator (so ``--seed``
    fixes it).  The parameter is named ``pre_alpha`` as in the paper's code.

    ``initial_alpha`` (a buffer, saved with the checkpoint) is each head's alpha at
    initialisation, so that what training changed can be told from where a head
    started: a random initialisation alone spreads the heads over (alpha_min, 2).
    Below ``FLOAT32_ALPHA_MIN`` (1.01) entmax is computed in float64, off the fused
    GPU kernel, and the alphas are read on the host at every call.
    It is NaN in a model loaded from a checkpoint written before it was kept.

    ``lr_scale`` s gives alpha its own learning rate: the logit is a = s * pre_alpha.
    An Adam-type optimizer moves each parameter by about its learning rate per update
    whatever the gradient's scale, so a then moves by about s times the model's
    learning rate (under plain SGD, s squared times); s = 1 is the paper's
    parametrisation.  The checkpoint keeps ``pre_alpha``, so a model is loaded with
    the scale it was trained with (``--alpha-lr-scale`` is a model option).

    ``floor`` (an :class:`AlphaFloor`, or None) raises the floor with the updates: fairseq's
    trainer calls ``set_num_updates`` on every module, and ``fairseq_sparse.hf`` does it for
    Hugging Face training.  The floor reached is the buffer ``alpha_floor``, saved with the
    checkpoint, so a trained model gives the same alphas wherever it is loaded.
    """

    def __init__(self, num_heads, init="random", alpha_min=ALPHA_MIN, lr_scale=1.0, floor=None):
        super().__init__()
        if not 1.0 <= alpha_min < 2.0:
            raise ValueError(f"--alpha-min must lie in [1, 2), got {alpha_min}")
        if not lr_scale > 0:  # NaN fails this too
            raise ValueError(f"--alpha-lr-scale must be positive, got {lr_scale}")
        if floor is not None and not floor.target > alpha_min:
            raise ValueError(f"--alpha-floor {floor.target} must lie above --alpha-min {alpha_min}")
        self.alpha_min = float(alpha_min)
        self.lr_scale = float(lr_scale)
        self.floor = floor
        self.register_buffer("alpha_floor", torch.tensor(self.alpha_min))
        init = parse_alpha_init(init)
        if init == "random":
            # Uniform in (alpha_min, 2), kept off the open ends where the logit is infinite.
            fraction = torch.empty(num_heads).uniform_(0.01, 0.99)
        else:
            if not alpha_min < init < 2.0:
                raise ValueError(f"--alpha-init must lie in (alpha_min={alpha_min}, 2), got {init}")
            fraction = torch.full((num_heads,), (init - alpha_min) / (2.0 - alpha_min))
        self.pre_alpha = nn.Parameter(torch.logit(fraction) / self.lr_scale)
        self.register_buffer("initial_alpha", self().detach().clone())

    @staticmethod
    def logit(alpha, alpha_min=ALPHA_MIN):
        """The logit a of an alpha (the inverse of alpha_min + (2 - alpha_min) sigmoid(a))."""
        return torch.logit((alpha - alpha_min) / (2.0 - alpha_min))

    def forward(self):
        """alpha of each head, shape (num_heads,), strictly above 1."""
        # At the paper's scale the parameter is the logit: no multiply on every attention call.
        logit = self.pre_alpha if self.lr_scale == 1.0 else self.lr_scale * self.pre_alpha
        floor = self.alpha_floor
        alpha = floor + (2.0 - floor) * torch.sigmoid(logit)
        if self.alpha_min == 1.0:  # a saturated sigmoid would round alpha to 1, where entmax is undefined
            alpha = alpha.clamp_min(1.0 + torch.finfo(alpha.dtype).eps)
        return alpha

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A trained alpha without its starting point (an older checkpoint): unknown, not this
        # model's fresh draw.  Without pre_alpha either (a stock fairseq module's weights)
        # there is nothing to load and the draw stays.
        if prefix + "pre_alpha" in state_dict and prefix + "initial_alpha" not in state_dict:
            state_dict[prefix + "initial_alpha"] = torch.full_like(self.initial_alpha, float("nan"))
        # Written before the floor could rise: it was alpha_min.
        if prefix + "pre_alpha" in state_dict and prefix + "alpha_floor" not in state_dict:
            state_dict[prefix + "alpha_floor"] = torch.tensor(self.alpha_min)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def set_num_updates(self, num_updates):
        """Raise the floor to where the schedule puts it after ``num_updates`` updates."""
        if self.floor is not None:
            self.alpha_floor.fill_(self.floor.at(num_updates, self.alpha_min))

    def extra_repr(self):
        scale = f", lr_scale={self.lr_scale}" if self.lr_scale != 1.0 else ""
        floor = f", floor={self.floor}" if self.floor is not None else ""
        return f"num_heads={self.pre_alpha.numel()}, alpha_min={self.alpha_min}{scale}{floor}"

