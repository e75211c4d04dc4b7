"""Building blocks shared by the research lines: the attention module, the sparse transformer
the encoder-decoders build on (:mod:`.transformer`), the per-head alpha, BERT loading and the
probability helpers."""

from .alpha_entmax_attention import AlphaEntmaxAttention  # noqa: F401
from ..entmax.head_alpha import HeadAlpha  # noqa: F401  (its home: the torch-only core)
