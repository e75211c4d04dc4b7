"""``entmax_transformer_lm``: fairseq's decoder-only ``transformer_lm`` with sparse attention
heads, the same options as ``entmax_transformer`` (``--attention-normalizer``, or
``--decoder-attention-normalizer``; a learnable alpha per head; the alpha floor), trained
with fairseq's ``language_modeling`` task or this package's ``length_extrapolation`` and
decoded with fairseq's own generation.  Its self-attention is causal, so the fused
kernel masks the future itself where it runs.  For length extrapolation, ``--positions``
puts the positions in the attention (none, ALiBi, RoPE or NAPE) instead of fairseq's
embeddings, and ``--length-scale`` scales each query by the keys it sees.
"""

import dataclasses
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig
from fairseq.models.transformer_lm import (DEFAULT_MAX_TARGET_POSITIONS, TransformerLanguageModel,
                                           TransformerLanguageModelConfig, base_lm_architecture)

from ..entmax.length_scale import LENGTH_SCALES, check_length_scale
from ..entmax.positions import POSITIONS, check_positions
from ..modules.transformer import EntmaxTransformerOptions, SparseAttentionModel, attention_of
from ..modules.transformer_layers import EntmaxTransformerDecoder


@dataclass
class LengthExtrapolationOptions(FairseqDataclass):
    positions: str = field(default="fairseq", metadata={
        "help": "position information: 'fairseq' (fairseq's own position embeddings, as --decoder-learned-pos and "
                "--no-token-positional-embeddings say), or in the attention, without embeddings: "
                f"{', '.join(POSITIONS)} (NoPE; ALiBi; RoPE; NAPE, ALiBi on half the heads and none on the rest)"})
    length_scale: str = field(default="none", metadata={
        "help": f"queries scaled by the keys they see, n: one of {', '.join(LENGTH_SCALES)} (log: a learned "
                "s_h log(n + 1) per head, scalable softmax's; adaptive: 1 + beta log(n + 1)^gamma with beta and "
                "gamma predicted per token and head, ASEntmax's, started near 1; adaptive_paper: the same started as "
                "ASEntmax's code starts it, beta near 0.69 and gamma by token); under --positions nape only "
                "the heads without ALiBi are scaled"})


@dataclass
class EntmaxLanguageModelConfig(TransformerLanguageModelConfig, EntmaxTransformerOptions, LengthExtrapolationOptions):
    """fairseq's language-model options, the sparse attention options (of which the
    decoder's apply: a decoder-only model has no encoder or cross-attention) and the
    position and length-scale options of length extrapolation."""


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
        positions = getattr(args, "positions", None) or "fairseq"
        length_scale = check_length_scale(getattr(args, "length_scale", None) or "none")
        if positions != "fairseq":
            check_positions(positions)
            args.no_token_positional_embeddings = True  # the attention holds the positions
        attention = dataclasses.replace(attention, positions="none" if positions == "fairseq" else positions,
                                        length_scale=length_scale)
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
