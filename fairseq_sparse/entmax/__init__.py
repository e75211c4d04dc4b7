"""Sparse normalisers: the one place the sparsemax / entmax maths lives.

Imports torch alone (no fairseq): ``from fairseq_sparse.entmax import entmax_alpha``
works in any PyTorch program.  :mod:`.normalizers` is the registry every model,
loss and report reads normaliser names from.
"""

from .activations import (  # noqa: F401
    FLOAT32_ALPHA_MIN,
    Entmax15Function,
    EntmaxAlphaFunction,
    SparsemaxFunction,
    entmax15,
    entmax_alpha,
    current_backend,
    has_cpp_kernel,
    has_triton_kernel,
    sparsemax,
    support_size,
    use_backend,
)
from .attention import AttentionOptions, attend  # noqa: F401
from .head_alpha import AlphaFloor, HeadAlpha  # noqa: F401
from .normalizers import NORMALIZERS, Normalizer, get_normalizer, register_normalizer  # noqa: F401
