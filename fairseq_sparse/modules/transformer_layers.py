"""fairseq's transformer encoder and decoder whose layers build :class:`AlphaEntmaxAttention`
through their own hooks (``build_self_attention``, ``build_encoder_attention``), as
fairseq's plugin examples do, instead of building fairseq's attention and swapping it.

Which normaliser and alpha options each attention site gets is the model's choice, given
to the encoder and decoder as a :class:`SiteAttention` (a callable the layers call with
the site and fairseq's own arguments for that attention).
"""

from dataclasses import dataclass
from typing import Dict, Optional

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer.transformer_decoder import TransformerDecoderBase
from fairseq.models.transformer.transformer_encoder import TransformerEncoderBase
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from ..entmax.head_alpha import AlphaFloor
from ..entmax.normalizers import Normalizer
from ..modules.alpha_entmax_attention import AlphaEntmaxAttention


@dataclass(frozen=True)
class SiteAttention:
    """Builds the attention of a site (``encoder``, ``decoder`` or ``cross``) with that site's
    normaliser and the model's alpha options; decoder self-attention is marked causal, so
    that the fused kernel masks the future itself.  ``positions`` and ``length_scale``
    (decoder-only models) serve the self-attention sites."""
    normalizers: Dict[str, Normalizer]
    alpha_init: object
    alpha_min: float
    alpha_lr_scale: float
    alpha_floor: Optional[AlphaFloor] = None
    positions: str = "none"
    length_scale: str = "none"

    def __call__(self, site, embed_dim, num_heads, **fairseq_options):
        extrapolation = {} if site == "cross" else {"positions": self.positions, "length_scale": self.length_scale}
        return AlphaEntmaxAttention(embed_dim, num_heads, normalizer=self.normalizers[site], alpha_init=self.alpha_init,
                                    alpha_min=self.alpha_min, alpha_lr_scale=self.alpha_lr_scale,
                                    alpha_floor=self.alpha_floor, causal_attn_mask=site == "decoder",
                                    **extrapolation, **fairseq_options)


class EntmaxEncoderLayer(TransformerEncoderLayerBase):
    def __init__(self, cfg, attention, return_fc=False):
        self.attention_builder = attention  # before fairseq's __init__, which builds the attention
        super().__init__(cfg, return_fc)

    def build_self_attention(self, embed_dim, cfg):
        return self.attention_builder(
            "encoder", embed_dim, cfg.encoder.attention_heads, dropout=cfg.attention_dropout, self_attention=True,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size)


class EntmaxDecoderLayer(TransformerDecoderLayerBase):
    def __init__(self, cfg, attention, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        self.attention_builder = attention
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)

    def shared_attention(self, site):
        """The attention module whose parameters the ``site`` attention (``decoder`` or ``cross``)
        of this layer uses as its own (``AlphaEntmaxAttention(shares=...)``), or None: its own.
        The extension point of a model that ties attention (``bert_ape``)."""
        return None

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return self.attention_builder(
            "decoder", embed_dim, cfg.decoder.attention_heads, dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn, self_attention=not cfg.cross_self_attention,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size, shares=self.shared_attention("decoder"))

    def build_encoder_attention(self, embed_dim, cfg):
        return self.attention_builder(
            "cross", embed_dim, cfg.decoder.attention_heads, kdim=cfg.encoder.embed_dim, vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout, encoder_decoder_attention=True, q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size, shares=self.shared_attention("cross"))


class EntmaxTransformerEncoder(TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, attention, return_fc=False):
        self.attention_builder = attention
        super().__init__(cfg, dictionary, embed_tokens, return_fc)

    def build_encoder_layer(self, cfg):
        return fsdp_wrap(EntmaxEncoderLayer(cfg, self.attention_builder, return_fc=self.return_fc),
                         min_num_params=cfg.min_params_to_wrap)


class EntmaxTransformerDecoder(TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, attention, no_encoder_attn=False, output_projection=None):
        self.attention_builder = attention
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn, output_projection)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return fsdp_wrap(EntmaxDecoderLayer(cfg, self.attention_builder, no_encoder_attn),
                         min_num_params=cfg.min_params_to_wrap)
