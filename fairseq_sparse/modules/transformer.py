"""The sparse-attention transformer that every encoder-decoder of the package builds on:
its options (:class:`EntmaxTransformerOptions`), the attention of each site
(:func:`attention_of`), what every sparse model adds to its fairseq base class
(:class:`SparseAttentionModel`) and the encoder-decoder itself (:class:`EntmaxTransformerBase`),
registered by the research lines: ``entmax_transformer`` (:mod:`fairseq_sparse.sparse_transformer`),
``bert_ape`` and ``dual_source_transformer`` (:mod:`fairseq_sparse.ape`).

Adaptively Sparse Transformers (Correia, Niculae & Martins, EMNLP 2019): every
attention site (encoder self, decoder self, encoder-decoder) is an
:class:`AlphaEntmaxAttention` with its own normaliser; with ``alpha_entmax``
each head learns its alpha.  Optionally the output layer is sparse too
(``--output-normalizer``, trained with the ``label_smoothed_entmax`` criterion
of Peters, Niculae & Martins, ACL 2019).
"""

from dataclasses import MISSING, dataclass, field, fields
from typing import Optional

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.logging import metrics
from fairseq.models.transformer import (
    DEFAULT_MAX_SOURCE_POSITIONS,
    DEFAULT_MAX_TARGET_POSITIONS,
    DEFAULT_MIN_PARAMS_TO_WRAP,
    TransformerConfig,
    TransformerModel,
    base_architecture,
)

from ..entmax.head_alpha import ALPHA_MIN, AlphaFloor, parse_alpha_init
from ..entmax.normalizers import get_normalizer, normalizer_names
from .transformer_layers import EntmaxTransformerDecoder, EntmaxTransformerEncoder, SiteAttention

SITES = ("encoder", "decoder", "cross")


@dataclass
class EntmaxTransformerOptions(FairseqDataclass):
    attention_normalizer: str = field(
        default="alpha_entmax",
        metadata={"help": f"normaliser of every attention head, one of {', '.join(normalizer_names())}; "
                          "the three per-site options below override it"},
    )
    encoder_attention_normalizer: Optional[str] = field(
        default=None, metadata={"help": "normaliser of encoder self-attention (default: --attention-normalizer)"}
    )
    decoder_attention_normalizer: Optional[str] = field(
        default=None, metadata={"help": "normaliser of decoder self-attention (default: --attention-normalizer)"}
    )
    cross_attention_normalizer: Optional[str] = field(
        default=None, metadata={"help": "normaliser of encoder-decoder attention (default: --attention-normalizer)"}
    )
    alpha_init: str = field(
        default="random",
        metadata={"help": "initial alpha of alpha_entmax heads: a number in (alpha_min, 2) for every head, "
                          "or 'random' (uniform in (alpha_min, 2) per head, as in Correia et al. 2019)"},
    )
    alpha_min: float = field(
        default=ALPHA_MIN,
        metadata={"help": "lower bound of a learned alpha: alpha = alpha_min + (2 - alpha_min) sigmoid(a); "
                          "1 gives the paper's 1 + sigmoid(a)"},
    )
    alpha_lr_scale: float = field(
        default=1.0,
        metadata={"help": "learning rate of the heads' alphas as a multiple of the model's (under Adam; "
                          "the alpha logit is this scale times its parameter); 1: the paper's"},
    )
    alpha_floor: Optional[float] = field(
        default=None,
        metadata={"help": "the conversion recipe, for a model trained from softmax weights: every learned head's "
                          "lowest alpha rises linearly from --alpha-min to this alpha over --alpha-floor-updates "
                          "updates, each head learning its own alpha above it (default: no schedule)"},
    )
    alpha_floor_updates: int = field(
        default=AlphaFloor.updates,
        metadata={"help": "updates over which --alpha-floor's floor rises"},
    )
    output_normalizer: str = field(
        default="softmax",
        metadata={"help": f"normaliser of the output distribution, one of {', '.join(normalizer_names(True))}; "
                          "sparse outputs are trained with --criterion label_smoothed_entmax"},
    )

    @classmethod
    def from_args(cls, args):
        """The options as typed fields, from a fairseq namespace: each one given there, else
        its default as stated once, above (a namespace built in Python or stored by an older
        checkpoint may lack a field; fairseq leaves options not given at None)."""
        values = {}
        for f in fields(cls):
            given = getattr(args, f.name, None)
            if given is not None:
                values[f.name] = given
            elif f.default is not MISSING:
                values[f.name] = f.default
            elif f.default_factory is not MISSING:
                values[f.name] = f.default_factory()
        return cls(**values)


def transformer_config(args):
    """fairseq's TransformerConfig from a model's namespace, with the defaults and checks of
    fairseq's ``TransformerModel.build_model`` (which this line's models restate, so as to hand
    their encoder and decoder the attention as an argument)."""
    base_architecture(args)  # every option present, in namespaces of older checkpoints too
    for side in ("encoder", "decoder"):
        if getattr(args, f"{side}_layers_to_keep", None):
            setattr(args, f"{side}_layers", len(getattr(args, f"{side}_layers_to_keep").split(",")))
    if getattr(args, "max_source_positions", None) is None:
        args.max_source_positions = DEFAULT_MAX_SOURCE_POSITIONS
    if getattr(args, "max_target_positions", None) is None:
        args.max_target_positions = DEFAULT_MAX_TARGET_POSITIONS
    if args.share_all_embeddings:
        args.share_decoder_input_output_embed = True
    if getattr(args, "offload_activations", False):
        args.checkpoint_activations = True  # offloading implies checkpointing
    if not args.share_all_embeddings:
        args.min_params_to_wrap = getattr(args, "min_params_to_wrap", DEFAULT_MIN_PARAMS_TO_WRAP)
    cfg = TransformerConfig.from_namespace(args)
    cfg.decoder.input_dim, cfg.decoder.output_dim = int(cfg.decoder.input_dim), int(cfg.decoder.output_dim)
    return cfg


def embeddings(model_class, cfg, src_dict, tgt_dict):
    """(encoder, decoder) token embeddings, one shared table under --share-all-embeddings, as
    fairseq's transformer builds them (checked as it checks them)."""
    if not cfg.share_all_embeddings:
        if cfg.merge_src_tgt_embed:
            raise ValueError("entmax_transformer does not support --merge-src-tgt-embed")
        return (model_class.build_embedding(cfg, src_dict, cfg.encoder.embed_dim, cfg.encoder.embed_path),
                model_class.build_embedding(cfg, tgt_dict, cfg.decoder.embed_dim, cfg.decoder.embed_path))
    if src_dict != tgt_dict:
        raise ValueError("--share-all-embeddings requires a joined dictionary")
    if cfg.encoder.embed_dim != cfg.decoder.embed_dim:
        raise ValueError("--share-all-embeddings requires --encoder-embed-dim to match --decoder-embed-dim")
    if cfg.decoder.embed_path and cfg.decoder.embed_path != cfg.encoder.embed_path:
        raise ValueError("--share-all-embeddings not compatible with --decoder-embed-path")
    shared = model_class.build_embedding(cfg, src_dict, cfg.encoder.embed_dim, cfg.encoder.embed_path)
    return shared, shared


def site_normalizers(options):
    """{site: registered normaliser} from the options, checked."""
    normalizers = {}
    for site in SITES:
        name = getattr(options, f"{site}_attention_normalizer")
        option = f"--{site}-attention-normalizer" if name else "--attention-normalizer"
        normalizers[site] = get_normalizer(name or options.attention_normalizer, option)
    return normalizers


def attention_of(options, args, sites):
    """(the :class:`~.layers.SiteAttention` of ``options``, the output normaliser), checked,
    for a model whose attention sites follow the normaliser options of ``sites`` (encoder,
    decoder, cross)."""
    normalizers = site_normalizers(options)
    output_normalizer = get_normalizer(options.output_normalizer, "--output-normalizer", fixed_alpha=True)
    if getattr(args, "checkpoint_activations", False) or getattr(args, "encoder_xformers_att_config", None) \
            or getattr(args, "decoder_xformers_att_config", None):
        raise ValueError("entmax_transformer supports neither --checkpoint-activations nor xformers attention")
    floor = None
    if options.alpha_floor is not None:
        if not any(normalizers[site].learned for site in sites):
            raise ValueError("--alpha-floor raises learned alphas, but no attention site is alpha_entmax")
        floor = AlphaFloor(options.alpha_floor, options.alpha_floor_updates)
    attention = SiteAttention(normalizers, parse_alpha_init(options.alpha_init), options.alpha_min,
                              options.alpha_lr_scale, floor)
    return attention, output_normalizer


class SparseAttentionModel:
    """What every model of this line adds to its fairseq base class, over the attention
    modules its ``attention_slots`` names: the heads' alphas, their mean in the training
    logs, and the output normaliser's probabilities."""

    def attention_modules(self):
        """(site, layer index, AlphaEntmaxAttention) for every attention module."""
        for site, i, owner, name in self.attention_slots():
            yield site, i, getattr(owner, name)

    def head_alphas(self, initial=False):
        """{(site, layer): alpha per head (tensor)} for every attention module; with ``initial``,
        each head's alpha at initialisation (NaN where the checkpoint predates keeping it)."""
        return {(site, i): module.alpha(initial).detach() for site, i, module in self.attention_modules()}

    def head_alpha_changes(self):
        """{(site, layer): learned minus initial alpha per head}: how far training moved each head."""
        initial = self.head_alphas(initial=True)
        return {sl: alpha - initial[sl] for sl, alpha in self.head_alphas().items()}

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        if self.training:
            # Mean alpha per site and layer as fairseq metrics: they land in the
            # progress bar and in --tensorboard-logdir, averaged over the interval.
            # Logged as tensors (fairseq's meters accept them) so that a GPU is not
            # made to wait on every update; they are read when the log is written.
            with torch.no_grad():
                for site, i, module in self.attention_modules():
                    if module.head_alpha is not None:
                        metrics.log_scalar(f"alpha_{site}{i}", module.head_alpha().mean(), round=3)
        return out

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        if not self.output_normalizer.sparse:  # softmax: fairseq's own (adaptive softmax included)
            return super().get_normalized_probs(net_output, log_probs, sample)
        logits = net_output[0].float()
        # Tokens outside the support get log-probability -inf: beam search never extends with them.
        return self.output_normalizer.log_probs(logits, -1) if log_probs else self.output_normalizer(logits, -1)



class EntmaxTransformerBase(SparseAttentionModel, TransformerModel):
    """Transformer whose attention heads use :class:`AlphaEntmaxAttention`, built by the
    layers' own hooks (:mod:`.transformer_layers`): with every normaliser ``softmax`` the model
    is fairseq's ``transformer`` exactly, parameter for parameter and draw for draw.  Not
    registered: the research lines register it and its subclasses under their names."""

    options_class = EntmaxTransformerOptions
    # Every attention site of the model, in the order reports list them.
    attention_sites = SITES
    # What build_encoder / build_decoder build, with the model's SiteAttention.
    encoder_class, decoder_class = EntmaxTransformerEncoder, EntmaxTransformerDecoder

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        gen_parser_from_dataclass(parser, cls.options_class())

    @classmethod
    def build_model(cls, args, task):
        """fairseq's transformer, built as its ``build_model`` builds it (:func:`transformer_config`,
        :func:`embeddings`, then the encoder and the decoder), with the attention, the options
        and the encoder handed to the builders as arguments."""
        options = cls.options_class.from_args(args)
        attention, output_normalizer = attention_of(options, args, {cls.normalizer_site(s) for s in cls.attention_sites})
        cfg = transformer_config(args)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder_embed_tokens, decoder_embed_tokens = embeddings(cls, cfg, src_dict, tgt_dict)
        encoder = cls.build_encoder(cfg, src_dict, encoder_embed_tokens, attention, options)
        decoder = cls.build_decoder(cfg, tgt_dict, decoder_embed_tokens, attention, options, encoder)
        model = cls(cfg, encoder, decoder)
        model.options = options
        model.output_normalizer = output_normalizer
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens, attention, options):
        """The encoder (``encoder_class``) whose layers build their attention with ``attention``."""
        return cls.encoder_class(cfg, src_dict, embed_tokens, attention)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens, attention, options, encoder):
        """The decoder (``decoder_class``); ``encoder`` is the model's, built before it."""
        return cls.decoder_class(cfg, tgt_dict, embed_tokens, attention, no_encoder_attn=cfg.no_cross_attention)

    @staticmethod
    def normalizer_site(site):
        """Which of the per-site normaliser options (encoder, decoder, cross) a site follows."""
        return site

    def attended_sources(self, src_tokens):
        """{site: the source tokens its keys are} for the sites that attend over the encoder input."""
        return {"encoder": src_tokens, "cross": src_tokens}

    def attention_slots(self):
        """(site, layer index, owning layer, attribute name) of every attention module: the
        extension point of a model with attention sites of its own (and ``attention_sites``)."""
        for i, layer in enumerate(self.encoder.layers):
            yield "encoder", i, layer, "self_attn"
        for i, layer in enumerate(self.decoder.layers):
            yield "decoder", i, layer, "self_attn"
            if getattr(layer, "encoder_attn", None) is not None:
                yield "cross", i, layer, "encoder_attn"
