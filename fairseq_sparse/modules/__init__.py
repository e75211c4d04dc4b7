"""Building blocks shared by the models: the attention module and the alpha parametrisation."""

from .alpha_entmax_attention import NORMALIZERS, AlphaEntmaxAttention  # noqa: F401
from .head_alpha import HeadAlpha  # noqa: F401
