"""``dual_source_transformer``: the MS-UEdin APE baseline (Junczys-Dowmunt &
Grundkiewicz, WMT 2018): one transformer encoder for src and another for mt,
and a decoder whose every layer attends to both, one after the other
(self-attention, then src context, then mt context, then feed-forward), all
randomly initialised.

It trains on the ``ape`` task's data as is: the two-segment source
``[CLS] src [SEP] mt [SEP]`` is split at the first ``[SEP]`` into the two
encoders' inputs.  Every attention module is :class:`AlphaEntmaxAttention`, so
the sparse normalisers apply here too (the mt encoder follows the encoder
option, the mt context attention the cross option).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq.models import FairseqEncoder, register_model, register_model_architecture
from fairseq.models.transformer import base_architecture
from fairseq.modules import LayerNorm
from torch import Tensor

from ..modules.transformer import EntmaxTransformerBase, EntmaxTransformerOptions
from ..modules.transformer_layers import EntmaxDecoderLayer, EntmaxTransformerDecoder, EntmaxTransformerEncoder
from ..entmax.normalizers import normalizer_names
from .triplets import mt_segment


class DualSourceEncoder(FairseqEncoder):
    """Two transformer encoders over the src and mt segments of the source, sharing
    the token embeddings; positions count from the start of each segment."""

    def __init__(self, cfg, dictionary, embed_tokens, attention):
        super().__init__(dictionary)
        self.src_encoder = EntmaxTransformerEncoder(cfg, dictionary, embed_tokens, attention)
        self.mt_encoder = EntmaxTransformerEncoder(cfg, dictionary, embed_tokens, attention)
        self.sep_index, self.padding_idx = dictionary.eos(), dictionary.pad()

    def split(self, src_tokens):
        """(src part, mt part), each the full width with the other segment padded out."""
        segment = mt_segment(src_tokens, self.sep_index, self.padding_idx).bool()
        nonpad = src_tokens.ne(self.padding_idx)
        pad = torch.full_like(src_tokens, self.padding_idx)
        return torch.where(nonpad & ~segment, src_tokens, pad), torch.where(segment, src_tokens, pad)

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False):
        src_part, mt_part = self.split(src_tokens)
        out = self.src_encoder(src_part, return_all_hiddens=return_all_hiddens)
        mt = self.mt_encoder(mt_part, return_all_hiddens=return_all_hiddens)
        out["mt_out"] = mt["encoder_out"]
        out["mt_padding_mask"] = mt["encoder_padding_mask"]
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        reordered = self.src_encoder.reorder_encoder_out(encoder_out, new_order)
        reordered["mt_out"] = [encoder_out["mt_out"][0].index_select(1, new_order)]
        reordered["mt_padding_mask"] = [encoder_out["mt_padding_mask"][0].index_select(0, new_order)]
        return reordered

    def max_positions(self):
        return self.src_encoder.max_positions()


class DualSourceDecoderLayer(EntmaxDecoderLayer):
    """A decoder layer with a second context attention, over the mt encoder."""

    def __init__(self, cfg, attention, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        super().__init__(cfg, attention, no_encoder_attn, add_bias_kv, add_zero_attn)
        if self.cross_self_attention or self.c_attn is not None or self.attn_ln is not None \
                or self.ffn_layernorm is not None or self.w_resid is not None:
            raise ValueError("dual_source_transformer supports none of --cross-self-attention and the "
                             "--scale-* options")
        self.mt_attn = self.build_encoder_attention(self.embed_dim, cfg)
        self.mt_attn_layer_norm = LayerNorm(self.embed_dim, export=cfg.export)
        # Set by DualSourceDecoder for the duration of one decoder call.
        self.mt_context: Optional[Tensor] = None
        self.mt_padding_mask: Optional[Tensor] = None

    def _sublayer(self, x, norm, block):
        residual = x
        if self.normalize_before:
            x = norm(x)
        x, attn = block(x)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = norm(x)
        return x, attn

    def _feed_forward(self, x):
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        return self.fc2(x), None

    def forward(self, x, encoder_out=None, encoder_padding_mask=None, incremental_state=None,
                prev_self_attn_state=None, prev_attn_state=None, self_attn_mask=None,
                self_attn_padding_mask=None, need_attn=False, need_head_weights=False):
        need_weights = need_attn or (not self.training and self.need_attn)
        x, _ = self._sublayer(x, self.self_attn_layer_norm, lambda q: self.self_attn(
            query=q, key=q, value=q, key_padding_mask=self_attn_padding_mask, incremental_state=incremental_state,
            need_weights=False, attn_mask=self_attn_mask))
        # The src attention is what fairseq reports as the alignment.
        x, attn = self._sublayer(x, self.encoder_attn_layer_norm, lambda q: self.encoder_attn(
            query=q, key=encoder_out, value=encoder_out, key_padding_mask=encoder_padding_mask,
            incremental_state=incremental_state, static_kv=True, need_weights=need_weights,
            need_head_weights=need_head_weights))
        x, _ = self._sublayer(x, self.mt_attn_layer_norm, lambda q: self.mt_attn(
            query=q, key=self.mt_context, value=self.mt_context, key_padding_mask=self.mt_padding_mask,
            incremental_state=incremental_state, static_kv=True, need_weights=False))
        x, _ = self._sublayer(x, self.final_layer_norm, self._feed_forward)
        return x, attn, None


class DualSourceDecoder(EntmaxTransformerDecoder):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return DualSourceDecoderLayer(cfg, self.attention_builder, no_encoder_attn)

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        for layer in self.layers:
            layer.mt_context, layer.mt_padding_mask = encoder_out["mt_out"][0], encoder_out["mt_padding_mask"][0]
        try:
            return super().extract_features(prev_output_tokens, encoder_out, incremental_state, **kwargs)
        finally:
            for layer in self.layers:
                layer.mt_context = layer.mt_padding_mask = None


@dataclass
class DualSourceOptions(EntmaxTransformerOptions):
    attention_normalizer: str = field(
        default="softmax",
        metadata={"help": f"normaliser of every attention head, one of {', '.join(normalizer_names())}; "
                          "the per-site options override it (the mt encoder follows the encoder's, the mt "
                          "context attention the cross attention's)"})


@register_model("dual_source_transformer")
class DualSourceTransformerModel(EntmaxTransformerBase):
    """src and mt encoders, a decoder attending to both; random initialisation."""

    options_class = DualSourceOptions
    attention_sites = ("encoder", "mt_encoder", "decoder", "cross", "mt_cross")
    encoder_class, decoder_class = DualSourceEncoder, DualSourceDecoder

    @staticmethod
    def normalizer_site(site):
        return {"mt_encoder": "encoder", "mt_cross": "cross"}.get(site, site)

    def attended_sources(self, src_tokens):
        src_part, mt_part = self.encoder.split(src_tokens)
        return {"encoder": src_part, "cross": src_part, "mt_encoder": mt_part, "mt_cross": mt_part}

    def attention_slots(self):
        for site, encoder in (("encoder", self.encoder.src_encoder), ("mt_encoder", self.encoder.mt_encoder)):
            for i, layer in enumerate(encoder.layers):
                yield site, i, layer, "self_attn"
        for i, layer in enumerate(self.decoder.layers):
            yield "decoder", i, layer, "self_attn"
            yield "cross", i, layer, "encoder_attn"
            yield "mt_cross", i, layer, "mt_attn"


@register_model_architecture("dual_source_transformer", "dual_source_transformer")
def dual_source_transformer(args):
    """fairseq's transformer base sizes; one embedding matrix for both encoders, the
    decoder and the output layer, always (the ape task has one vocabulary)."""
    args.share_all_embeddings = True
    base_architecture(args)
