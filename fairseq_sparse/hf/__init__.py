"""Sparse attention in Hugging Face ``transformers`` models, through its attention interface.

    import fairseq_sparse.hf
    model = AutoModel.from_pretrained(NAME, attn_implementation="entmax15")   # or "sparsemax"
    model = fairseq_sparse.hf.sparsify(model, "alpha_entmax")                 # a learnable alpha per head
    model.save_pretrained(OUT)
    model = fairseq_sparse.hf.from_pretrained(AutoModel, OUT)                 # the same normaliser and alphas

Importing this module registers every normaliser of :mod:`fairseq_sparse.entmax.normalizers`
as an attention implementation of ``transformers`` (``AttentionInterface``), with the
eager attention's mask function (``AttentionMaskInterface``): models then pass it the
same additive 4-D masks (padding, causal, sliding windows, cached keys) as to their eager
attention, so no mask is dropped, and masked keys get probability exactly 0 under the
sparse normalisers.  The attention is the package's one entry point,
:func:`fairseq_sparse.entmax.attend` (which takes fewer key/value heads, grouped-query
attention, as they are; this adapter only reshapes): the eager attention with its softmax replaced
(scores ``scaling q.k``, the mask added, the normaliser in float32, dropout in training),
whose probabilities are returned as the attention weights (``output_attentions=True``),
with their exact zeros; on CUDA a mask that is padding and/or causal goes to the fused
``entmax_attention`` instead (attention dropout in training included), where no weights are asked for.

``alpha_entmax`` learns one alpha per query head (Correia, Niculae & Martins, EMNLP 2019)
through the :class:`~fairseq_sparse.entmax.HeadAlpha` that :func:`sparsify` adds to each
attention module: a registered submodule, so the optimizer, ``state_dict`` and
``save_pretrained`` see it.  The choice is recorded in the model's config
(``fairseq_sparse``), which :func:`from_pretrained` reads back.

Imports torch and transformers, never fairseq.
"""

import contextlib
import contextvars
import functools
import json
from pathlib import Path

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from ..entmax.attention import attend
from ..entmax.head_alpha import ALPHA_MIN, AlphaFloor, HeadAlpha, parse_alpha_init
from ..entmax.normalizers import get_normalizer, normalizer_names

# What some models pass an attention function to change the scores (T5's relative bias,
# Gemma 2's soft cap, attention sinks): not applied here, so refused.
UNSUPPORTED = ("position_bias", "softcap", "s_aux", "sinks")

# The config attribute that records what sparsify() did, for from_pretrained().
CONFIG_KEY = "fairseq_sparse"
# sparsify()'s start for learned alphas: near softmax, the start that keeps a pretrained
# model's accuracy (docs/results/sparse_transformer.md#sparse-attention-in-hugging-face-models).
ALPHA_INIT = 1.05
# The saved names of the learned alphas (HeadAlpha's parameter and buffer).
HEAD_ALPHA_KEY = ".head_alpha."
# Set while from_pretrained() loads a model whose alphas it loads itself, after sparsify().
_loading_alphas = contextvars.ContextVar("fairseq_sparse_loading_alphas", default=False)


def _wants_weights(module, kwargs):
    """Whether the caller asked for the attention weights (``output_attentions``)."""
    if kwargs.get("output_attentions") or getattr(getattr(module, "config", None), "output_attentions", False):
        return True
    try:  # transformers 5 collects them with hooks, whose collector says what it is collecting
        from transformers.utils.output_capturing import _active_collector
    except ImportError:
        return False
    collecting = _active_collector.get() or {}
    return any("attentions" in key for key in collecting)


def attention_function(name):
    """The attention function of the normaliser ``name``, as transformers calls it:
    ``fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs)``
    with (B, H, T, D) tensors; returns the output (B, T, H, D) and the probabilities
    (B, H, Tq, Tk) where asked for."""
    normalizer = get_normalizer(name, "attn_implementation")

    def attend_in_transformers(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        for option in UNSUPPORTED:  # each changes the scores before the normaliser: refused, never dropped
            if kwargs.get(option) is not None:
                raise ValueError(f"attn_implementation {name!r}: {type(module).__name__} passes {option}, which this "
                                 "attention does not apply; use the model's eager attention")
        if query.shape[1] % key.shape[1]:
            raise ValueError(f"{type(module).__name__}: {query.shape[1]} query heads cannot share {key.shape[1]} "
                             "key/value heads")
        head_alpha = getattr(module, "head_alpha", None)
        if normalizer.learned and head_alpha is None:
            raise ValueError(f"attn_implementation {name!r}: {type(module).__name__} has no learned alpha; "
                             f"call fairseq_sparse.hf.sparsify(model, {name!r}) first")
        # The mask may be longer than the keys (a static cache); without one the module says
        # whether it is causal (a single query sees every key anyway).
        mask = attention_mask[:, :, :, : key.shape[-2]] if attention_mask is not None else None
        causal = (mask is None and query.shape[2] > 1
                  and bool(kwargs.get("is_causal", getattr(module, "is_causal", False))))
        # Sliding-window layers (Mistral, Qwen2, Gemma's local layers) name their window beside
        # the mask that applies it, so that the fused kernels can skip the keys outside it.
        output, probs = attend(
            query, key, value, normalizer, alpha=head_alpha() if normalizer.learned else None,
            alpha_min=head_alpha.alpha_min if normalizer.learned else ALPHA_MIN, causal=causal, mask=mask,
            scale=scaling, dropout=dropout if module.training else 0.0,
            need_weights=_wants_weights(module, kwargs), window=kwargs.get("sliding_window"))
        return output.transpose(1, 2).contiguous(), probs

    attend_in_transformers.__name__ = f"{name}_attention_forward"
    attend_in_transformers.__doc__ = (f"Eager attention with its softmax replaced by the {name} normaliser "
                                      "(fairseq_sparse.hf).")
    return attend_in_transformers


def serves(model_class):
    """Whether ``model_class`` computes its attention through transformers' attention
    interface, so that a registered name reaches it (transformers' own test; its flag
    ``_supports_attention_backend`` where that test is missing)."""
    test = getattr(model_class, "_can_set_attn_implementation", None)
    return bool(test()) if test is not None else bool(getattr(model_class, "_supports_attention_backend", False))


def _refuse_unserved(choose):
    """``PreTrainedModel.get_correct_attn_implementation`` that refuses a normaliser's name for
    a model whose attention does not go through the interface: transformers accepts any
    registered name for any model, and such a model (DeBERTa-v2, Bloom) would record the
    name and stay softmax, or fail later with a KeyError (Falcon)."""
    @functools.wraps(choose)
    def checked(self, requested_attention, *args, **kwargs):
        if requested_attention in normalizer_names() and not serves(type(self)):
            raise ValueError(f"attn_implementation={requested_attention!r}: {type(self).__name__} computes its "
                             "attention in its own code, not through transformers' attention interface, so its "
                             "heads would stay softmax; fairseq_sparse.hf serves the models that use the interface "
                             "(BERT, RoBERTa, DistilBERT, Llama, Qwen2, GPT-2, ...)")
        return choose(self, requested_attention, *args, **kwargs)

    checked._fairseq_sparse_checked = True
    return checked


def _expect_head_alphas(adjust):
    """``PreTrainedModel._adjust_missing_and_unexpected_keys`` that, inside
    :func:`from_pretrained`, does not report the saved alphas as unexpected: the model
    transformers builds has none yet, and from_pretrained loads them right after (a load
    report saying "UNEXPECTED ... not ok if you expect identical arch" would alarm a user
    for a correct load).  Anywhere else they are reported, since they are then dropped."""
    @functools.wraps(adjust)
    def adjusted(self, loading_info):
        adjust(self, loading_info)
        if _loading_alphas.get():
            loading_info.unexpected_keys -= {k for k in loading_info.unexpected_keys if HEAD_ALPHA_KEY in k}

    adjusted._fairseq_sparse_checked = True
    return adjusted


def register():
    """Register every normaliser of the registry as an attention implementation (with the
    eager mask function), refused for models the interface does not serve; called on
    import, and again after a normaliser is added."""
    for name in normalizer_names():
        AttentionInterface.register(name, attention_function(name))
        AttentionMaskInterface.register(name, eager_mask)
    for name, wrap in (("get_correct_attn_implementation", _refuse_unserved),
                       ("_adjust_missing_and_unexpected_keys", _expect_head_alphas)):
        method = getattr(PreTrainedModel, name)
        if not getattr(method, "_fairseq_sparse_checked", False):
            setattr(PreTrainedModel, name, wrap(method))


def attention_modules(model):
    """The modules of ``model`` that call transformers' attention interface (those with a
    ``scaling`` and an ``is_causal``: ``BertSelfAttention``, ``LlamaAttention``,
    ``BartAttention``, ...), by name."""
    return {name: m for name, m in model.named_modules() if hasattr(m, "scaling") and hasattr(m, "is_causal")}


def query_heads(module):
    """How many query heads an attention module has."""
    for attribute in ("num_heads", "num_attention_heads"):
        if isinstance(getattr(module, attribute, None), int):
            return getattr(module, attribute)
    projection = getattr(module, "q_proj", None) or getattr(module, "query", None)
    head_dim = getattr(module, "head_dim", None) or getattr(module, "attention_head_size", None)
    if isinstance(projection, nn.Linear) and head_dim:
        return projection.out_features // head_dim
    raise ValueError(f"{type(module).__name__}: cannot tell its number of query heads (no num_heads, "
                     "num_attention_heads, or q_proj and head_dim)")


def sparsify(model, normalizer, alpha_init=ALPHA_INIT, alpha_min=ALPHA_MIN, floor=None):
    """Switch every attention module of ``model`` to ``normalizer`` and return the model.

    For a learned normaliser (``"alpha_entmax"``) each attention module gets a
    :class:`~fairseq_sparse.entmax.HeadAlpha` of one alpha per query head (``alpha_init``:
    a number in (alpha_min, 2), by default ``ALPHA_INIT``, near softmax, or ``"random"``:
    uniform in (alpha_min, 2) per head, from torch's generator), as the submodule
    ``head_alpha``: call it before building the optimizer.  A model whose heads have
    learned alphas already keeps them: calling again with another ``alpha_init`` or
    ``alpha_min`` is an error (``sparsify(model, "softmax")`` first starts them afresh).
    ``floor`` (a :class:`~fairseq_sparse.entmax.AlphaFloor`) is the conversion recipe: the
    heads' lowest alpha rises with the updates that :func:`set_num_updates` (or the Trainer
    callback, :class:`fairseq_sparse.hf.trainer.SparseAttentionCallback`) reports.
    The choice is recorded in ``model.config`` for :func:`from_pretrained`.
    """
    chosen = get_normalizer(normalizer, "normalizer")
    if floor is not None and not chosen.learned:
        raise ValueError(f"floor: {chosen.name} has no learned alpha to raise; use 'alpha_entmax'")
    if floor is not None and not isinstance(floor, AlphaFloor):
        raise ValueError(f"floor must be a fairseq_sparse.entmax.AlphaFloor, got {floor!r}")
    modules = attention_modules(model)
    if not modules:
        raise ValueError(f"model: {type(model).__name__} has no attention module that transformers' attention "
                         "interface serves (none with `scaling` and `is_causal`)")
    if chosen.learned:
        alpha_init = parse_alpha_init(alpha_init)
        learned = any(isinstance(getattr(m, "head_alpha", None), HeadAlpha) for m in modules.values())
        record = getattr(model.config, CONFIG_KEY, None) or {}
        asked = (str(alpha_init), float(alpha_min), floor.to_dict() if floor else None)
        if learned and asked != (record.get("alpha_init"), record.get("alpha_min"), record.get("floor")):
            raise ValueError(
                f"sparsify(alpha_init={alpha_init!r}, alpha_min={alpha_min}, floor={floor}): the model's heads "
                f"already have learned alphas (alpha_init={record.get('alpha_init')!r}, "
                f"alpha_min={record.get('alpha_min')}, floor={record.get('floor')}), which this call would keep; "
                "to start them afresh, call sparsify(model, 'softmax') first")
    parameter = next(model.parameters(), None)
    for module in modules.values():
        if chosen.learned:
            if not isinstance(getattr(module, "head_alpha", None), HeadAlpha):
                head_alpha = HeadAlpha(query_heads(module), alpha_init, alpha_min, floor=floor)
                if parameter is not None:
                    head_alpha.to(parameter.device)
                module.head_alpha = head_alpha
        elif hasattr(module, "head_alpha"):
            del module.head_alpha
    register()
    model.set_attn_implementation(chosen.name)
    record = {"normalizer": chosen.name}
    if chosen.learned:
        record.update(alpha_init=str(alpha_init), alpha_min=float(alpha_min))
        if floor is not None:
            record["floor"] = floor.to_dict()
    model.config.update({CONFIG_KEY: record})
    return model


def set_num_updates(model, num_updates):
    """Tell the heads of ``model`` how many updates training has made, which moves an
    :class:`~fairseq_sparse.entmax.AlphaFloor` schedule (as fairseq's trainer does for its
    models); heads without a schedule are left as they are."""
    for module in model.modules():
        if isinstance(module, HeadAlpha):
            module.set_num_updates(num_updates)


def parameter_groups(model, lr, alpha_lr, weight_decay=0.0):
    """The optimizer's parameter groups: every weight at ``lr`` (and ``weight_decay``), the
    heads' alpha logits (``head_alpha.pre_alpha``) at their own ``alpha_lr`` and without
    weight decay, which would pull every head towards alpha = (floor + 2) / 2."""
    alphas = [p for n, p in model.named_parameters() if n.endswith("head_alpha.pre_alpha")]
    others = [p for n, p in model.named_parameters() if not n.endswith("head_alpha.pre_alpha")]
    groups = [{"params": others, "lr": lr, "weight_decay": weight_decay}]
    if alphas:
        groups.append({"params": alphas, "lr": alpha_lr, "weight_decay": 0.0})
    return groups


def head_alphas(model):
    """{module name: alpha of each head} of a sparsified model with learned alphas."""
    return {name: m.head_alpha().detach() for name, m in attention_modules(model).items()
            if isinstance(getattr(m, "head_alpha", None), HeadAlpha)}


def attention_alphas(model, initial=False):
    """{module name: alpha of each head} for every attention module of ``model``: a learned
    head's from its :class:`~fairseq_sparse.entmax.HeadAlpha` (with ``initial``, its alpha at
    initialisation), a fixed normaliser's own alpha otherwise (softmax's 1 for a model never
    sparsified)."""
    name = (getattr(model.config, CONFIG_KEY, None) or {}).get("normalizer", "softmax")
    alphas = {}
    for module_name, module in attention_modules(model).items():
        head_alpha = getattr(module, "head_alpha", None)
        if isinstance(head_alpha, HeadAlpha):
            alphas[module_name] = (head_alpha.initial_alpha if initial else head_alpha()).detach()
        else:
            alphas[module_name] = torch.full((query_heads(module),), float(get_normalizer(name).alpha))
    return alphas


@contextlib.contextmanager
def evaluating(model, weights=False):
    """Within it, ``model`` is in eval mode and, with ``weights``, gives its attention weights
    when asked (``output_attentions``): an implementation that computes none (``sdpa``, flash
    attention) is replaced by ``eager``, the same softmax.  Mode and implementation are
    restored after."""
    implementation, training = model.config._attn_implementation, model.training
    if weights and implementation != "eager" and implementation not in normalizer_names():
        model.set_attn_implementation("eager")
    model.eval()
    try:
        yield model
    finally:
        model.train(training)
        if model.config._attn_implementation != implementation:
            model.set_attn_implementation(implementation)


def attention_density_counts(attentions, attention_mask):
    """(nonzero weights, allowed weights) per layer, as tensors, over the (query, key) pairs
    of real tokens: ``attentions`` as a model returns them with ``output_attentions=True``
    (one (B, H, T, T) tensor per layer), ``attention_mask`` (B, T) with 1 at real tokens.
    Their ratio is each layer's attention density (1 for softmax)."""
    real = attention_mask.bool()
    pairs = (real[:, None, :, None] & real[:, None, None, :])
    nonzero = torch.stack([((w > 0) & pairs).sum() for w in attentions]).double()
    allowed = torch.stack([pairs.expand_as(w).sum() for w in attentions]).double()
    return nonzero, allowed


def _saved_tensors(path, wanted):
    """The tensors of a save_pretrained directory whose names end as ``wanted`` says."""
    from safetensors.torch import load_file

    path = Path(path)
    index = path / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    tensors = {}
    for file in files:
        if not (path / file).is_file():
            raise FileNotFoundError(f"{path / file}: missing (from_pretrained reads save_pretrained's safetensors)")
        tensors.update({k: v for k, v in load_file(str(path / file)).items() if wanted(k)})
    return tensors


def from_pretrained(model_class, path, **kwargs):
    """``model_class.from_pretrained(path, **kwargs)`` for a model saved after
    :func:`sparsify`: the same normaliser, and the learned alphas it was saved with."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    record = getattr(config, CONFIG_KEY, None)
    if not record:
        return model_class.from_pretrained(path, **kwargs)
    register()
    normalizer = get_normalizer(record["normalizer"], f"{path}: config {CONFIG_KEY}.normalizer")
    token = _loading_alphas.set(normalizer.learned)
    try:
        model = model_class.from_pretrained(path, attn_implementation=normalizer.name, **kwargs)
    finally:
        _loading_alphas.reset(token)
    floor = AlphaFloor(**record["floor"]) if record.get("floor") else None
    sparsify(model, normalizer.name, record.get("alpha_init", "random"), record.get("alpha_min", ALPHA_MIN), floor)
    if normalizer.learned:
        saved = _saved_tensors(path, lambda k: HEAD_ALPHA_KEY in k)
        prefix = getattr(model, "base_model_prefix", "")
        state = {}
        for key in (k for k in model.state_dict() if HEAD_ALPHA_KEY in k):
            names = [key, key.removeprefix(f"{prefix}."), f"{prefix}.{key}"]
            found = next((n for n in names if n in saved), None)
            if found is None and key.endswith(".alpha_floor"):
                continue  # saved before the floor could rise: it stays alpha_min
            if found is None:
                raise ValueError(f"{path}: no saved {key} (saved with another model class, or before sparsify?)")
            state[key] = saved[found]
        model.load_state_dict(state, strict=False)
    return model


register()
