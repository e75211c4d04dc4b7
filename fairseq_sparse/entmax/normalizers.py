"""The normaliser registry: every normaliser of attention heads and output layers, once.

An entry says what a name means everywhere it is accepted (``--attention-normalizer``
and its per-site forms, ``--output-normalizer``, the ``label_smoothed_entmax`` loss,
the attention report): its alpha (fixed, or learned per head), the function that
normalises, and whether it can give exact zeros.  Callers resolve a name once, at
construction, with :func:`get_normalizer`; adding a normaliser is one
:func:`register_normalizer` call here.

All are alpha-entmax (Peters, Niculae & Martins, ACL 2019) at some alpha:
softmax is alpha = 1, 1.5-entmax alpha = 1.5, sparsemax alpha = 2, and
``alpha_entmax`` learns alpha in (1, 2] per head (Correia, Niculae & Martins, EMNLP 2019).
"""

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from .activations import FLOAT32_ALPHA_MIN, entmax15, entmax_alpha, sparsemax


def _softmax(x, dim=-1):
    return torch.softmax(x, dim)


@dataclass(frozen=True)
class Normalizer:
    """A registered normaliser.

    ``function(x, dim)`` for a fixed alpha; ``function(x, alpha, dim)`` with a tensor of
    alphas when ``learned`` (``entmax_alpha``).  ``sparse``: it can give probability 0."""

    name: str
    alpha: Optional[float]
    function: Callable
    sparse: bool

    @property
    def learned(self):
        """Its alpha is learned (one per attention head, :class:`~fairseq_sparse.modules.HeadAlpha`)."""
        return self.alpha is None

    def __call__(self, x, dim=-1, alpha=None, alpha_min=None):
        """``alpha_min``: a bound the learned alpha keeps by construction (``HeadAlpha``).
        From FLOAT32_ALPHA_MIN up, alpha is not read on the host (on a GPU that would stall
        every call); otherwise its range is checked and its precision chosen there."""
        if self.learned:
            if alpha is None:
                raise ValueError(f"the {self.name} normaliser needs an alpha")
            trusted = alpha_min is not None and alpha_min >= FLOAT32_ALPHA_MIN
            return self.function(x, alpha, dim=dim, check_alpha=not trusted)
        return self.function(x, dim=dim)

    def log_probs(self, x, dim=-1):
        """log of the probabilities: -inf outside a sparse normaliser's support, so that beam
        search never extends a hypothesis with such a token."""
        if self.learned:
            raise ValueError(f"the {self.name} normaliser learns its alpha per attention head; "
                             "an output layer takes a fixed alpha")
        if not self.sparse:
            return torch.log_softmax(x, dim)
        return torch.log(self(x, dim))


NORMALIZERS = {}


def register_normalizer(name, alpha, function, sparse):
    """Add a normaliser to the registry (``alpha`` None: learned per head)."""
    if name in NORMALIZERS:
        raise ValueError(f"normaliser {name!r} registered twice")
    NORMALIZERS[name] = Normalizer(name, alpha, function, sparse)
    return NORMALIZERS[name]


def get_normalizer(name, option="--attention-normalizer", fixed_alpha=False):
    """The registered normaliser called ``name``; an unknown name (or, with ``fixed_alpha``,
    a learned one) is an error that names ``option`` and the choices."""
    if isinstance(name, Normalizer):
        name = name.name
    choices = normalizer_names(fixed_alpha)
    if name not in choices:
        raise ValueError(f"{option}: unknown normaliser {name!r}; choose one of {', '.join(choices)}")
    return NORMALIZERS[name]


def normalizer_names(fixed_alpha=False):
    """The registered names, in registration order (with ``fixed_alpha``, those not learned)."""
    return tuple(n for n, normalizer in NORMALIZERS.items() if not (fixed_alpha and normalizer.learned))


def fixed_alpha_normalizer(alpha):
    """The sparse normaliser with this fixed alpha (1.5: entmax15, 2: sparsemax)."""
    for normalizer in NORMALIZERS.values():
        if normalizer.sparse and normalizer.alpha == float(alpha):
            return normalizer
    known = ", ".join(f"{n.alpha:g} ({n.name})" for n in NORMALIZERS.values() if n.sparse and not n.learned)
    raise ValueError(f"no sparse normaliser has alpha {alpha}: the fixed alphas are {known}")


register_normalizer("softmax", 1.0, _softmax, sparse=False)
register_normalizer("sparsemax", 2.0, sparsemax, sparse=True)
register_normalizer("entmax15", 1.5, entmax15, sparse=True)
register_normalizer("alpha_entmax", None, entmax_alpha, sparse=True)
