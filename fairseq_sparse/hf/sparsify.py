"""Making a model's heads sparse (:func:`sparsify`), training them (the optimizer's groups,
the floor's updates) and loading a saved sparse model as it was saved: every model built from
a config that records a sparse normaliser gets its heads' alphas and length scales before
transformers loads the weights (:func:`add_recorded_heads`, run by a patch of
``PreTrainedModel.post_init``: :mod:`.transformers_compat`).

Imports torch and transformers, never fairseq.
"""

import warnings

import torch

from ..entmax.head_alpha import ALPHA_MIN, AlphaFloor, HeadAlpha, parse_alpha_init
from ..entmax.length_scale import LengthScale, check_length_scale
from ..entmax.normalizers import get_normalizer
from . import transformers_compat
from .attention import (HEAD_ALPHA, LENGTH_SCALE, _LAYER_INPUT, attention_modules, head_alpha_of, query_heads,
                        refuse_unserved, register_attention)

# The config attribute that records what sparsify() did, for from_pretrained().
CONFIG_KEY = "fairseq_sparse"
# sparsify()'s start for learned alphas: near softmax, the start that keeps a pretrained
# model's accuracy (docs/results/sparse_transformer.md#sparse-attention-in-hugging-face-models).
ALPHA_INIT = 1.05
# PEFT's ``modules_to_save`` for the heads' alphas: LoRA then trains and saves them with the
# adapters.
PEFT_MODULES = [HEAD_ALPHA]


def add_recorded_heads(model):
    """Give a model whose config records a sparse normaliser (``config.fairseq_sparse``, written
    by :func:`sparsify`) its heads' alphas and length scales; nothing for another model.  Run
    after every model's ``post_init`` (:func:`register`): its modules exist, and
    ``from_pretrained`` then loads the saved alphas as the weights they are, in every loading
    path that builds the model through transformers (Auto classes, ``pipeline``, PEFT's base
    model), with nothing reported missing or unexpected."""
    record = getattr(model.config, CONFIG_KEY, None)
    if not record:
        return
    normalizer = get_normalizer(record["normalizer"], f"config {CONFIG_KEY}.normalizer")
    model.config.attn_implementation = normalizer.name  # saved again with the model
    implementation = transformers_compat.attn_implementation(model)
    if implementation not in (normalizer.name, "eager"):  # asked for by the caller, so a warning, once
        warnings.warn(f"the model's config records the {normalizer.name} normaliser (fairseq_sparse) but it is "
                      f"built with attn_implementation={implementation!r}, so its heads are not {normalizer.name}; "
                      "leave attn_implementation out to load it as saved", stacklevel=2)
    if record.get("length_scale", "none") != "none":
        with torch.device("cpu"):
            _add_length_scales(model, record["length_scale"])
    if not normalizer.learned:
        return
    floor = AlphaFloor(**record["floor"]) if record.get("floor") else None
    alpha_min = record.get("alpha_min", ALPHA_MIN)
    start = parse_alpha_init(record.get("alpha_init", "random"))
    # The saved alphas replace the start; "random" would draw from torch's generator while loading.
    start = (alpha_min + 2.0) / 2 if start == "random" else start
    # Real float32 tensors, not transformers' meta ones in the loading dtype: a directory saved
    # without the floor's buffer keeps alpha_min there, as HeadAlpha's own loading does, and
    # a half-precision load keeps the alphas in float32 (bfloat16 would move 1.01 below 1.01).
    transformers_compat.keep_in_float32(model, HEAD_ALPHA)
    with torch.device("cpu"):
        for module in attention_modules(model).values():
            if head_alpha_of(module) is None:
                head_alpha = HeadAlpha(query_heads(module), start, alpha_min, floor=floor).float()
                setattr(module, HEAD_ALPHA, head_alpha)


def _keep_layer_input(module, args, kwargs):
    """A forward pre-hook of an attention module: its input (``hidden_states``) kept for the
    adaptive length scale, which predicts from it and which transformers' attention call
    does not pass."""
    setattr(module, _LAYER_INPUT, kwargs["hidden_states"] if "hidden_states" in kwargs else args[0])


def _drop_layer_input(module, args, kwargs, output):
    setattr(module, _LAYER_INPUT, None)


def _add_length_scales(model, form):
    """Give every attention module of ``model`` a :class:`LengthScale` of ``form`` (none where it
    has one), with the hooks that hand the adaptive form its layer input."""
    width = getattr(model.config, "hidden_size", None)
    for module in attention_modules(model).values():
        if isinstance(getattr(module, LENGTH_SCALE, None), LengthScale):
            continue
        scale = LengthScale(form, query_heads(module), width)
        setattr(module, LENGTH_SCALE, scale)
        if scale.reads_input:
            module.register_forward_pre_hook(_keep_layer_input, with_kwargs=True)
            module.register_forward_hook(_drop_layer_input, with_kwargs=True)


def register():
    """Register the normalisers as attention implementations (:func:`register_attention`, public
    interfaces) and apply the two patches of ``PreTrainedModel`` that loading a saved sparse
    model and refusing an unserved one need (:mod:`.transformers_compat`); idempotent."""
    register_attention()
    return transformers_compat.apply(transformers_compat.patches(add_recorded_heads, refuse_unserved))


def sparsify(model, normalizer, alpha_init=ALPHA_INIT, alpha_min=ALPHA_MIN, floor=None, length_scale="none"):
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
    ``length_scale`` (:mod:`fairseq_sparse.entmax.length_scale`: ``"log"``, ``"adaptive"`` or ``"adaptive_paper"``)
    gives each attention module a :class:`~fairseq_sparse.entmax.length_scale.LengthScale`
    (the submodule ``length_scale``, its weights saved with the model), which multiplies every
    query by a factor growing with the keys it sees; the adaptive form predicts it from the
    attention module's input, which a forward pre-hook keeps for the call.  Once given, a
    model keeps its length scale.  The choice is recorded in ``model.config`` for
    :func:`from_pretrained`.
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
        learned = any(head_alpha_of(m) is not None for m in modules.values())
        record = getattr(model.config, CONFIG_KEY, None) or {}
        asked = (str(alpha_init), float(alpha_min), floor.to_dict() if floor else None)
        if learned and asked != (record.get("alpha_init"), record.get("alpha_min"), record.get("floor")):
            raise ValueError(
                f"sparsify(alpha_init={alpha_init!r}, alpha_min={alpha_min}, floor={floor}): the model's heads "
                f"already have learned alphas (alpha_init={record.get('alpha_init')!r}, "
                f"alpha_min={record.get('alpha_min')}, floor={record.get('floor')}), which this call would keep; "
                "to start them afresh, call sparsify(model, 'softmax') first")
    check_length_scale(length_scale, "length_scale")
    had = (getattr(model.config, CONFIG_KEY, None) or {}).get("length_scale", "none")
    if had != "none" and length_scale not in ("none", had):
        raise ValueError(f"sparsify(length_scale={length_scale!r}): the model's heads already have the {had!r} "
                         "length scale")
    length_scale = had if length_scale == "none" else length_scale
    parameter = next(model.parameters(), None)
    if length_scale != "none":
        _add_length_scales(model, length_scale)
        if parameter is not None:
            for module in modules.values():
                getattr(module, LENGTH_SCALE).to(parameter.device)
    for module in modules.values():
        if chosen.learned:
            if head_alpha_of(module) is None:
                head_alpha = HeadAlpha(query_heads(module), alpha_init, alpha_min, floor=floor)
                if parameter is not None:
                    head_alpha.to(parameter.device)
                setattr(module, HEAD_ALPHA, head_alpha)
        elif hasattr(module, HEAD_ALPHA):
            delattr(module, HEAD_ALPHA)
    register()
    model.set_attn_implementation(chosen.name)
    record = {"normalizer": chosen.name}
    if length_scale != "none":
        record["length_scale"] = length_scale
    if chosen.learned:
        record.update(alpha_init=str(alpha_init), alpha_min=float(alpha_min))
        if floor is not None:
            record["floor"] = floor.to_dict()
    model.config.update({CONFIG_KEY: record, "attn_implementation": chosen.name})
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
    warn_if_alphas_frozen(model)
    learned = {id(p) for m in model.modules() if isinstance(m, HeadAlpha) for p in m.parameters()}
    alphas = [p for p in model.parameters() if id(p) in learned]
    others = [p for p in model.parameters() if id(p) not in learned]
    groups = [{"params": others, "lr": lr, "weight_decay": weight_decay}]
    if alphas:
        groups.append({"params": alphas, "lr": alpha_lr, "weight_decay": 0.0})
    return groups


def warn_if_alphas_frozen(model):
    """Warn when ``model`` has learned alphas none of which would train (PEFT freezes every
    weight of the base model, the alphas included, unless ``modules_to_save`` names them)."""
    heads = [m for m in model.modules() if isinstance(m, HeadAlpha)]
    if heads and not any(p.requires_grad for m in heads for p in m.parameters()):
        warnings.warn("the heads' learned alphas are frozen (requires_grad=False) and will not train; "
                      f"under PEFT, add modules_to_save={PEFT_MODULES} (fairseq_sparse.hf.PEFT_MODULES) to the "
                      "adapter's config", stacklevel=3)


def head_alphas(model):
    """{module name: alpha of each head} of a sparsified model with learned alphas."""
    return {name: head_alpha_of(m)().detach() for name, m in attention_modules(model).items()
            if head_alpha_of(m) is not None}


def attention_alphas(model, initial=False):
    """{module name: alpha of each head} for every attention module of ``model``: a learned
    head's from its :class:`~fairseq_sparse.entmax.HeadAlpha` (with ``initial``, its alpha at
    initialisation), a fixed normaliser's own alpha otherwise (softmax's 1 for a model never
    sparsified)."""
    name = (getattr(model.config, CONFIG_KEY, None) or {}).get("normalizer", "softmax")
    alphas = {}
    for module_name, module in attention_modules(model).items():
        head_alpha = head_alpha_of(module)
        if head_alpha is not None:
            alphas[module_name] = (head_alpha.initial_alpha if initial else head_alpha()).detach()
        else:
            alphas[module_name] = torch.full((query_heads(module),), float(get_normalizer(name).alpha))
    return alphas


def from_pretrained(model_class, path, **kwargs):
    """``model_class.from_pretrained(path, **kwargs)`` for a model saved after :func:`sparsify`:
    the same normaliser, and the learned alphas it was saved with.  transformers' own
    ``from_pretrained`` does the same once this module is imported; this one also serves
    directories whose config records the normaliser only as ``fairseq_sparse``."""
    from transformers import AutoConfig

    register()
    record = getattr(AutoConfig.from_pretrained(path), CONFIG_KEY, None)
    if record and "attn_implementation" not in kwargs:
        kwargs["attn_implementation"] = get_normalizer(record["normalizer"], f"{path}: config {CONFIG_KEY}.normalizer").name
    return model_class.from_pretrained(path, **kwargs)
