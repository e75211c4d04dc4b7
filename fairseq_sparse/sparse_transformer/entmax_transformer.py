"""``entmax_transformer``: fairseq's transformer with sparse attention heads
(:class:`~fairseq_sparse.modules.transformer.EntmaxTransformerBase`), and its presets."""

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import base_architecture, transformer_iwslt_de_en, transformer_wmt_en_de

from ..modules.transformer import EntmaxTransformerBase


@register_model("entmax_transformer")
class EntmaxTransformerModel(EntmaxTransformerBase):
    """Adaptively Sparse Transformers (Correia, Niculae & Martins, EMNLP 2019): fairseq's
    transformer whose every attention site has its own normaliser, with a learnable alpha per
    head under ``alpha_entmax``."""


def _tiny(args):
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 128)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    base_architecture(args)


# Same sizes as fairseq's transformer presets of the same names.
register_model_architecture("entmax_transformer", "entmax_transformer")(base_architecture)
register_model_architecture("entmax_transformer", "entmax_transformer_iwslt_de_en")(transformer_iwslt_de_en)
register_model_architecture("entmax_transformer", "entmax_transformer_wmt_en_de")(transformer_wmt_en_de)
register_model_architecture("entmax_transformer", "entmax_transformer_tiny")(_tiny)
