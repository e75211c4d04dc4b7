"""``entmax_transformer_lm``: fairseq's decoder-only ``transformer_lm`` with sparse attention
heads, the same options as ``entmax_transformer`` (``--attention-normalizer``, or
``--decoder-attention-normalizer``; a learnable alpha per head; the alpha floor), trained
with fairseq's ``language_modeling`` task or this package's ``length_extrapolation`` and
decoded with fairseq's own generation.  Its self-attention is causal, so the fused
kernel masks the future itself where it runs.
"""

from dataclasses import dataclass

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig
from fairseq.models.transformer_lm import (DEFAULT_MAX_TARGET_POSITIONS, TransformerLanguageModel,
                                           TransformerLanguageModelConfig, base_lm_architecture)

from .entmax_transformer import EntmaxTransformerOptions, SparseAttentionModel, attention_of
from .layers import EntmaxTransformerDecoder


@dataclass
class EntmaxLanguageModelConfig(TransformerLanguageModelConfig, EntmaxTransformerOptions):
    """fairseq's language-model options and the sparse attention options (of which the
    decoder's apply: a decoder-only model has no encoder or cross-attention)."""


@register_model("entmax_transformer_lm", dataclass=EntmaxLanguageModelConfig)
class EntmaxTransformerLanguageModel(SparseAttentionModel, TransformerLanguageModel):
    """A decoder-only transformer whose self-attention heads are :class:`AlphaEntmaxAttention`
    (built by the decoder layers' own hook, :mod:`.layers`)."""

    attention_sites = ("decoder",)

    @classmethod
    def build_model(cls, args, task):
        for option in ("character_embeddings", "adaptive_input", "adaptive_softmax_cutoff"):
            if getattr(args, option, None):
                raise ValueError(f"entmax_transformer_lm: --{option.replace('_', '-')} is not supported")
        if args.decoder_layers_to_keep:
            args.decoder_layers = len(args.decoder_layers_to_keep.split(","))
        if getattr(args, "max_target_positions", None) is None:
            args.max_target_positions = getattr(args, "tokens_per_sample", DEFAULT_MAX_TARGET_POSITIONS)
        options = EntmaxTransformerOptions.from_args(args)
        attention, output_normalizer = attention_of(options, args, cls.attention_sites)
        embed_tokens = cls.build_embedding(args, task.source_dictionary, args.decoder_input_dim)
        decoder = EntmaxTransformerDecoder(TransformerConfig.from_namespace(args), task.target_dictionary,
                                           embed_tokens, attention, no_encoder_attn=True)
        model = cls(decoder)
        model.options = options
        model.output_normalizer = output_normalizer
        return model

    def attention_slots(self):
        for i, layer in enumerate(self.decoder.layers):
            yield "decoder", i, layer, "self_attn"


def _tiny(args):
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 64)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 256)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    base_lm_architecture(args)


# entmax_transformer_lm itself has transformer_lm's sizes (registered with the model); a tiny one for CPU:
register_model_architecture("entmax_transformer_lm", "entmax_transformer_lm_tiny")(_tiny)
