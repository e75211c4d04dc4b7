"""Sparse attention in Hugging Face ``transformers`` models, through its attention interface.

    import fairseq_sparse.hf
    model = AutoModel.from_pretrained(NAME, attn_implementation="entmax15")   # or "sparsemax"
    model = fairseq_sparse.hf.sparsify(model, "alpha_entmax")                 # a learnable alpha per head
    model.save_pretrained(OUT)
    model = AutoModel.from_pretrained(OUT)        # after `import fairseq_sparse.hf`: the same normaliser and alphas

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
``save_pretrained`` see it.  The choice is recorded in the model's config: the normaliser as
transformers' own ``attn_implementation`` (so that transformers builds the model with it, and
refuses it by name where this module is not imported, rather than loading softmax), and
``fairseq_sparse`` (alpha start, bound and floor), from which every model built from that
config gets its heads' alphas before transformers loads the weights: ``from_pretrained``,
``pipeline(model=...)`` and ``Trainer`` checkpoints load the sparse model as it was saved.
That and the refusal of models the interface does not serve are the two patches this module
applies to transformers (:func:`register`, each on ``PreTrainedModel``): transformers has no
public hook between building a model and loading its weights.  Under PEFT the alphas
train when the adapter's config names ``modules_to_save=["head_alpha"]`` (``PEFT_MODULES``).

Imports torch and transformers, never fairseq.
"""

import contextlib
import functools
import warnings
from pathlib import Path

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from ..entmax.attention import attend
from ..entmax.head_alpha import ALPHA_MIN, AlphaFloor, HeadAlpha, parse_alpha_init
from ..entmax.length_scale import LengthScale, check_length_scale
from ..entmax.normalizers import get_normalizer, normalizer_names

# What some models pass an attention function to change the scores (T5's relative bias,
# Gemma 2's soft cap, attention sinks): not applied here, so refused.
UNSUPPORTED = ("position_bias", "softcap", "s_aux", "sinks")

# The config attribute that records what sparsify() did, for from_pretrained().
CONFIG_KEY = "fairseq_sparse"
# sparsify()'s start for learned alphas: near softmax, the start that keeps a pretrained
# model's accuracy (docs/results/sparse_transformer.md#sparse-attention-in-hugging-face-models).
ALPHA_INIT = 1.05
# The attribute of an attention module that holds its heads' alphas; PEFT's
# ``modules_to_save`` names it so that LoRA trains and saves them with the adapters.
HEAD_ALPHA = "head_alpha"
PEFT_MODULES = [HEAD_ALPHA]
# The attribute of an attention module that holds its length scale (sparsify's length_scale),
# and the one where the layer input the adaptive form reads waits for the attention call.
LENGTH_SCALE = "length_scale"
_LAYER_INPUT = "_fairseq_sparse_layer_input"


def head_alpha_of(module):
    """The learned alphas of an attention module: its :class:`~fairseq_sparse.entmax.HeadAlpha`,
    or the wrapper that computes with one (PEFT's ``modules_to_save``, which forwards calls
    and attributes to its trained copy); None for a head of a fixed normaliser."""
    alpha = getattr(module, HEAD_ALPHA, None)
    if isinstance(alpha, nn.Module) and any(isinstance(m, HeadAlpha) for m in alpha.modules()):
        return alpha
    return None


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
        head_alpha = head_alpha_of(module)
        if normalizer.learned and head_alpha is None:
            raise ValueError(f"attn_implementation {name!r}: {type(module).__name__} has no learned alpha; "
                             f"call fairseq_sparse.hf.sparsify(model, {name!r}) to add them (a model saved "
                             "after sparsify loads its own with `import fairseq_sparse.hf` before loading)")
        # The mask may be longer than the keys (a static cache); without one the module says
        # whether it is causal (a single query sees every key anyway).
        mask = attention_mask[:, :, :, : key.shape[-2]] if attention_mask is not None else None
        causal = (mask is None and query.shape[2] > 1
                  and bool(kwargs.get("is_causal", getattr(module, "is_causal", False))))
        scale = getattr(module, LENGTH_SCALE, None)
        length_scale = None
        if isinstance(scale, nn.Module):
            layer_input = getattr(module, _LAYER_INPUT, None)
            length_scale = lambda seen: scale(seen, layer_input)  # noqa: E731
        # Sliding-window layers (Mistral, Qwen2, Gemma's local layers) name their window beside
        # the mask that applies it, so that the fused kernels can skip the keys outside it.
        output, probs = attend(
            query, key, value, normalizer, alpha=head_alpha() if normalizer.learned else None,
            alpha_min=head_alpha.alpha_min if normalizer.learned else ALPHA_MIN, causal=causal, mask=mask,
            scale=scaling, dropout=dropout if module.training else 0.0,
            need_weights=_wants_weights(module, kwargs), window=kwargs.get("sliding_window"),
            length_scale=length_scale)
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


def _build_recorded_alphas(post_init):
    """``PreTrainedModel.post_init`` that gives a model whose config records a learned
    normaliser (``config.fairseq_sparse``, written by :func:`sparsify`) its heads' alphas as
    soon as its modules exist: ``from_pretrained`` then loads the saved alphas as the weights
    they are, in every loading path that builds the model through transformers (Auto classes,
    ``pipeline``, PEFT's base model), with nothing reported missing or unexpected."""
    @functools.wraps(post_init)
    def with_alphas(self):
        post_init(self)
        _add_recorded_alphas(self)

    with_alphas._fairseq_sparse_checked = True
    return with_alphas


def _add_recorded_alphas(model):
    record = getattr(model.config, CONFIG_KEY, None)
    if not record:
        return
    normalizer = get_normalizer(record["normalizer"], f"config {CONFIG_KEY}.normalizer")
    model.config.attn_implementation = normalizer.name  # saved again with the model
    implementation = model.config._attn_implementation
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
    model._keep_in_fp32_modules_strict = set(model._keep_in_fp32_modules_strict or ()) | {HEAD_ALPHA}
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
    """Register every normaliser of the registry as an attention implementation (with the
    eager mask function), refused for models the interface does not serve, and give a
    model built from a sparsified config its alphas (:func:`_build_recorded_alphas`);
    called on import, and again after a normaliser is added."""
    for name in normalizer_names():
        AttentionInterface.register(name, attention_function(name))
        AttentionMaskInterface.register(name, eager_mask)
    for name, wrap in (("get_correct_attn_implementation", _refuse_unserved), ("post_init", _build_recorded_alphas)):
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


# What save_pretrained writes for a tokenizer (one of them at least); without any,
# AutoTokenizer builds a default tokenizer of five special tokens, which reads every word as [UNK].
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


def load_tokenizer(path, option, tokenizer=None):
    """The tokenizer saved in the model directory ``path`` (``save_pretrained``, or
    ``Trainer(processing_class=tokenizer).save_model``), or the one at ``tokenizer`` (a
    directory or name) where given; ``option`` names the command's option in the error,
    raised where none was saved, rather than reading text with a tokenizer without a
    vocabulary."""
    from transformers import AutoTokenizer

    where = tokenizer if tokenizer is not None else path
    if Path(where).is_dir() and not any((Path(where) / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"{option} {where}: no tokenizer saved beside the model (none of "
                         f"{', '.join(TOKENIZER_FILES)}); save it with the model (tokenizer.save_pretrained(DIR), or "
                         "Trainer(processing_class=tokenizer)), or give the model's tokenizer with --tokenizer")
    try:
        return AutoTokenizer.from_pretrained(str(where))
    except (OSError, ValueError) as e:
        raise ValueError(f"{option} {where}: cannot load its tokenizer ({e})") from None


def attends_causally(model):
    """Whether the attention of ``model`` is causal (a query sees no later key)."""
    return any(bool(getattr(m, "is_causal", False)) for m in attention_modules(model).values())


def attention_density_counts(attentions, attention_mask, causal=False):
    """(nonzero weights, allowed weights) per layer, as tensors, over the (query, key) pairs
    a query may attend to: both real tokens and, with ``causal``, the key not after the query.
    ``attentions`` as a model returns them with ``output_attentions=True`` (one (B, H, T, T)
    tensor per layer), ``attention_mask`` (B, T) with 1 at real tokens.  Their ratio is each
    layer's attention density (1 for softmax)."""
    real = attention_mask.bool()
    pairs = (real[:, None, :, None] & real[:, None, None, :])
    if causal:
        length = real.shape[1]
        pairs = pairs & torch.ones(length, length, dtype=torch.bool, device=real.device).tril()
    nonzero = torch.stack([((w > 0) & pairs).sum() for w in attentions]).double()
    allowed = torch.stack([pairs.expand_as(w).sum() for w in attentions]).double()
    return nonzero, allowed


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

register()
