"""``bert_ape``: a BERT-initialised, shared encoder-decoder for automatic post-editing.

Correia & Martins, "A Simple and Effective Approach to Automatic Post-Editing with
Transfer Learning" (ACL 2019).  The encoder is BERT reading ``[CLS] src [SEP] mt
[SEP]`` with segment ids 0/1; the decoder has BERT's shape and is initialised from
the same checkpoint: self-attention and feed-forward from BERT's layer of the same
depth, context attention from that self-attention (CA <- SA), embeddings tied
between encoder, decoder input and output layer.  The sharing studied in the
paper's ablation is a flag each: ``--share-self-attn-with-encoder`` (SA <->
encoder SA), ``--tie-context-to-self-attn`` (CA <-> SA) and
``--share-ffn-with-encoder`` (FF <-> encoder FF).

Built as fairseq's transformer with post-norm layers, GELU, learned positions and
an embedding LayerNorm, whose weights are then set from BERT (the encoder equals
Hugging Face's ``BertModel`` on the same input; tested), and whose attention
modules are :class:`AlphaEntmaxAttention` (``--attention-normalizer`` and the
per-site options of ``entmax_transformer``; softmax by default, as BERT was
trained).  The BERT configuration is stored in the checkpoint, so loading one
(``fairseq-generate``) needs neither the BERT files nor ``--bert-model``.
"""

import json
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from torch import nn

from ..modules.transformer import EntmaxTransformerBase, EntmaxTransformerOptions
from ..modules.transformer_layers import EntmaxDecoderLayer, EntmaxTransformerDecoder, EntmaxTransformerEncoder
from ..entmax.normalizers import normalizer_names
from ..modules.bert import load_bert_model
from .triplets import mt_segment

INIT_CHOICES = ("bert", "random")


@dataclass
class BertAPEOptions(EntmaxTransformerOptions):
    attention_normalizer: str = field(
        default="softmax",
        metadata={"help": f"normaliser of every attention head, one of {', '.join(normalizer_names())}; "
                          "BERT was pre-trained with softmax; the per-site options override it"})
    encoder_init: str = field(default="bert", metadata={"help": "encoder weights: 'bert' or 'random'"})
    decoder_init: str = field(
        default="bert", metadata={"help": "decoder weights: 'bert' (BERT's layers) or 'random' (a transformer decoder)"})
    context_attn_init: str = field(
        default="self_attn",
        metadata={"help": "context attention of a BERT-initialised decoder: 'self_attn' (CA <- SA, copied from "
                          "BERT's self-attention) or 'random'"})
    share_self_attn_with_encoder: bool = field(
        default=False, metadata={"help": "decoder self-attention shares its parameters with the encoder's "
                                         "self-attention of the same layer (SA <-> encoder SA)"})
    tie_context_to_self_attn: bool = field(
        default=False, metadata={"help": "decoder context attention shares its parameters with the decoder's "
                                         "self-attention of the same layer (CA <-> SA)"})
    share_ffn_with_encoder: bool = field(
        default=False, metadata={"help": "decoder feed-forward shares its parameters with the encoder's "
                                         "feed-forward of the same layer (FF <-> encoder FF)"})
    bert_layers: int = field(
        default=0, metadata={"help": "use only BERT's first N layers for the encoder and the decoder "
                                     "(0: all of them); a smaller model for quick runs"})
    decoder_segment: int = field(
        default=1, metadata={"help": "BERT segment (token type) embedding added to the decoder's inputs: 1 "
                                     "(segment B, as the authors' code) or 0"})
    restart_mt_positions: bool = field(
        default=False, metadata={"help": "positions restart from 0 at the mt segment (as the authors' code did) "
                                         "instead of running on from the src segment"})


class BertAPEEncoder(EntmaxTransformerEncoder):
    """fairseq's encoder with BERT's input embedding: word + position + segment,
    where the segment (0 for src, 1 for mt) is read off the source: every token
    after the first ``[SEP]``."""

    def configure_bert_input(self, type_vocab_size, sep_index, restart_mt_positions):
        self.token_type_embed = nn.Embedding(type_vocab_size, self.embed_tokens.embedding_dim)
        self.sep_index = sep_index
        self.restart_mt_positions = restart_mt_positions

    def segments_and_positions(self, src_tokens):
        nonpad = src_tokens.ne(self.padding_idx).long()
        segment = mt_segment(src_tokens, self.sep_index, self.padding_idx)
        index = torch.cumsum(nonpad, 1) - 1  # 0-based position among real tokens (any padding side)
        if self.restart_mt_positions:
            src_length = (nonpad * (1 - segment)).sum(1, keepdim=True)  # [CLS] src [SEP]
            index = index - segment * src_length
        # fairseq's learned positions reserve rows 0..padding_idx; BERT's position p is row p + padding_idx + 1.
        positions = (index + self.padding_idx + 1) * nonpad + self.padding_idx * (1 - nonpad)
        return segment, positions

    def forward_embedding(self, src_tokens, token_embedding=None):
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)
        x = embed = self.embed_scale * token_embedding
        segment, positions = self.segments_and_positions(src_tokens)
        # fairseq's module refuses given positions while it has a padding_idx; same table, looked up directly.
        x = x + F.embedding(positions, self.embed_positions.weight, self.padding_idx) + self.token_type_embed(segment)
        x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        return x, embed


def _copy_(param, value):
    with torch.no_grad():
        param.copy_(value)


def _load_linear(linear, bert, prefix):
    _copy_(linear.weight, bert[f"{prefix}.weight"])
    _copy_(linear.bias, bert[f"{prefix}.bias"])


def _load_self_attention(attn, norm, bert, layer, shared=False):
    """BERT's self-attention of ``layer`` into ``attn`` and its LayerNorm into ``norm``; with
    ``shared``, the projections are another module's and keep what that one holds."""
    p = f"encoder.layer.{layer}.attention"
    if not shared:
        for proj, name in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")):
            _load_linear(getattr(attn, proj), bert, f"{p}.self.{name}")
        _load_linear(attn.out_proj, bert, f"{p}.output.dense")
    _load_linear(norm, bert, f"{p}.output.LayerNorm")


def _load_feed_forward(layer_module, bert, layer, shared=False):
    """BERT's feed-forward of ``layer``; with ``shared``, fc1 and fc2 are another layer's and
    keep what that one holds."""
    if not shared:
        _load_linear(layer_module.fc1, bert, f"encoder.layer.{layer}.intermediate.dense")
        _load_linear(layer_module.fc2, bert, f"encoder.layer.{layer}.output.dense")
    _load_linear(layer_module.final_layer_norm, bert, f"encoder.layer.{layer}.output.LayerNorm")


def _load_positions(embed_positions, bert, padding_idx, extra=0):
    # --max-source/target-positions below BERT's keep its first positions.
    table = bert["embeddings.position_embeddings.weight"][:embed_positions.weight.shape[0] - padding_idx - 1]
    with torch.no_grad():
        embed_positions.weight[padding_idx + 1:padding_idx + 1 + table.shape[0]] = table + extra


class LayerShares(NamedTuple):
    """What a decoder layer shares: the encoder layer's self-attention and feed-forward (fc1,
    fc2) where given, and whether its context attention shares its own self-attention's."""
    self_attn: Optional[nn.Module] = None
    ffn: Optional[Tuple[nn.Module, nn.Module]] = None
    context_with_self_attn: bool = False


class BertAPEDecoderLayer(EntmaxDecoderLayer):
    """A decoder layer built sharing what ``shares`` names (the paper's SA <-> encoder SA,
    CA <-> SA, FF <-> encoder FF): each attention is built with the module whose parameters it
    uses (``shared_attention``), and fc1 and fc2 are the encoder layer's own."""

    def __init__(self, cfg, attention, shares, no_encoder_attn=False):
        self.shares = shares  # read by the hooks that fairseq's __init__ calls, dropped after it
        super().__init__(cfg, attention, no_encoder_attn)
        del self.shares

    def shared_attention(self, site):
        if site == "decoder":
            return self.shares.self_attn
        return self.self_attn if self.shares.context_with_self_attn else None

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        if self.shares.ffn is not None:
            return self.shares.ffn[0]
        return super().build_fc1(input_dim, output_dim, q_noise, qn_block_size)

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        if self.shares.ffn is not None:
            return self.shares.ffn[1]
        return super().build_fc2(input_dim, output_dim, q_noise, qn_block_size)


class BertAPEDecoder(EntmaxTransformerDecoder):
    """fairseq's decoder whose layer i is built sharing with the encoder's layer i."""

    def __init__(self, cfg, dictionary, embed_tokens, attention, encoder, options, no_encoder_attn=False):
        # Read by build_decoder_layer while fairseq's __init__ builds the layers, dropped after it.
        self.encoder_layers, self.options = iter(encoder.layers), options
        super().__init__(cfg, dictionary, embed_tokens, attention, no_encoder_attn)
        del self.encoder_layers

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        encoder_layer, options = next(self.encoder_layers), self.options
        shares = LayerShares(
            self_attn=encoder_layer.self_attn if options.share_self_attn_with_encoder else None,
            ffn=(encoder_layer.fc1, encoder_layer.fc2) if options.share_ffn_with_encoder else None,
            context_with_self_attn=options.tie_context_to_self_attn)
        layer = BertAPEDecoderLayer(cfg, self.attention_builder, shares, no_encoder_attn)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap)


@register_model("bert_ape")
class BertAPEModel(EntmaxTransformerBase):
    """BERT encoder and BERT-initialised decoder over a shared WordPiece vocabulary."""

    options_class = BertAPEOptions

    encoder_class = BertAPEEncoder

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens, attention, options, encoder):
        return BertAPEDecoder(cfg, tgt_dict, embed_tokens, attention, encoder, options,
                              no_encoder_attn=cfg.no_cross_attention)

    @classmethod
    def build_model(cls, args, task):
        options = cls.options_class.from_args(args)
        for option in ("encoder_init", "decoder_init"):
            if getattr(options, option) not in INIT_CHOICES:
                raise ValueError(f"--{option.replace('_', '-')} must be one of {INIT_CHOICES}")
        if options.context_attn_init not in ("self_attn", "random"):
            raise ValueError("--context-attn-init must be 'self_attn' or 'random'")
        config, weights = cls.bert_config_and_weights(args, options)
        cls.set_bert_shape(args, config)
        model = super().build_model(args, task)
        dictionary = task.source_dictionary
        model.encoder.configure_bert_input(config.type_vocab_size, dictionary.eos(), options.restart_mt_positions)
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.eps = config.layer_norm_eps
        if weights is not None:
            model.load_bert(weights)
        return model

    @staticmethod
    def bert_config_and_weights(args, options):
        """BERT's config, and its weights unless this model is being restored from a
        checkpoint (whose args carry the config; the weights come from the checkpoint)."""
        from transformers import BertConfig

        # Not an option: written here when the model is first built, kept in the checkpoint's args.
        stored = getattr(args, "bert_config_json", None)
        if stored:
            return BertConfig.from_dict(json.loads(stored)), None
        path = getattr(args, "bert_model", None)  # the ape task's option
        if not path:
            raise ValueError("bert_ape needs --bert-model (a BERT checkpoint directory or cached model name)")
        bert = load_bert_model(path)
        config = bert.config
        keep = options.bert_layers or config.num_hidden_layers
        if not 0 < keep <= config.num_hidden_layers:
            raise ValueError(f"--bert-layers {keep}: {path} has {config.num_hidden_layers} layers")
        config.num_hidden_layers = keep
        if config.hidden_act != "gelu" or getattr(config, "position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"--bert-model {path}: bert_ape supports BERT with GELU and absolute positions, "
                             f"got {config.hidden_act} / {config.position_embedding_type}")
        args.bert_config_json = config.to_json_string()
        return config, {k: v.detach().clone() for k, v in bert.state_dict().items()}

    @staticmethod
    def set_bert_shape(args, config):
        """Every size of the fairseq transformer from BERT's config.  A transformer option given
        on the command line must agree with BERT (fewer layers: --bert-layers); --dropout,
        --attention-dropout and --activation-dropout override BERT's own rates."""
        shape = {"embed_dim": config.hidden_size, "ffn_embed_dim": config.intermediate_size,
                 "layers": config.num_hidden_layers, "attention_heads": config.num_attention_heads,
                 "normalize_before": False, "learned_pos": True}
        fixed = {f"{side}_{name}": value for side in ("encoder", "decoder") for name, value in shape.items()}
        fixed.update(activation_fn="gelu", no_scale_embedding=True, layernorm_embedding=True,
                     share_all_embeddings=True, share_decoder_input_output_embed=True,
                     no_token_positional_embeddings=False)
        for option, value in fixed.items():
            given = getattr(args, option, None)  # fairseq's transformer options have no defaults: None if not given
            if given is not None and given != value:
                hint = "; for fewer layers use --bert-layers" if option.endswith("_layers") else ""
                raise ValueError(f"--{option.replace('_', '-')} {given}: bert_ape takes it from the BERT checkpoint "
                                 f"({value}){hint}")
            setattr(args, option, value)
        rates = {"dropout": config.hidden_dropout_prob, "attention_dropout": config.attention_probs_dropout_prob,
                 "activation_dropout": 0.0}
        for option, value in rates.items():
            if getattr(args, option, None) is None:
                setattr(args, option, value)
        args.max_source_positions = min(getattr(args, "max_source_positions", 512) or 512,
                                        config.max_position_embeddings)
        args.max_target_positions = min(getattr(args, "max_target_positions", 512) or 512,
                                        config.max_position_embeddings)

    def load_bert(self, bert):
        """Set the encoder and (unless --decoder-init random) the decoder from BERT.  A
        parameter the decoder shares (built so, :class:`BertAPEDecoder`) holds what its
        source holds: the shared tensor is not loaded again from the decoder's side."""
        enc, dec, pad = self.encoder, self.decoder, self.encoder.padding_idx
        encoder_bert = self.options.encoder_init == "bert"
        decoder_bert = self.options.decoder_init == "bert"
        if encoder_bert or decoder_bert:  # one embedding matrix for encoder, decoder and output layer
            _copy_(enc.embed_tokens.weight, bert["embeddings.word_embeddings.weight"])
        if encoder_bert:
            _load_positions(enc.embed_positions, bert, pad)
            _copy_(enc.token_type_embed.weight, bert["embeddings.token_type_embeddings.weight"])
            _load_linear(enc.layernorm_embedding, bert, "embeddings.LayerNorm")
            for i, layer in enumerate(enc.layers):
                _load_self_attention(layer.self_attn, layer.self_attn_layer_norm, bert, i)
                _load_feed_forward(layer, bert, i)
        if decoder_bert:
            # The decoder's inputs all have one segment: its type embedding is folded into the positions.
            segment = self.options.decoder_segment
            types = bert["embeddings.token_type_embeddings.weight"]
            if not 0 <= segment < types.shape[0]:
                raise ValueError(f"--decoder-segment {segment}: the BERT has {types.shape[0]} segment embeddings")
            _load_positions(dec.embed_positions, bert, pad, extra=types[segment])
            _load_linear(dec.layernorm_embedding, bert, "embeddings.LayerNorm")
            options = self.options
            for i, layer in enumerate(dec.layers):
                _load_self_attention(layer.self_attn, layer.self_attn_layer_norm, bert, i,
                                     shared=options.share_self_attn_with_encoder)
                if options.context_attn_init == "self_attn":
                    _load_self_attention(layer.encoder_attn, layer.encoder_attn_layer_norm, bert, i,
                                         shared=options.tie_context_to_self_attn)
                _load_feed_forward(layer, bert, i, shared=options.share_ffn_with_encoder)


@register_model_architecture("bert_ape", "bert_ape")
def bert_ape(args):
    """All sizes come from the BERT checkpoint (see BertAPEModel.set_bert_shape); every
    option of BertAPEOptions has its default there."""
