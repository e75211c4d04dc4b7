"""The attention function that ``transformers`` calls for a sparse normaliser
(:func:`attention_function`), its registration in transformers' attention interface
(:func:`register_attention`), and where it finds a module's alphas and length scale.

Imports torch and transformers, never fairseq.
"""

from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from ..entmax.attention import AttentionOptions, attend
from ..entmax.head_alpha import ALPHA_MIN, HeadAlpha
from ..entmax.normalizers import get_normalizer, normalizer_names
from . import transformers_compat

# What some models pass an attention function to change the scores (T5's relative bias,
# Gemma 2's soft cap, attention sinks): not applied here, so refused.
UNSUPPORTED = ("position_bias", "softcap", "s_aux", "sinks")

# The attribute of an attention module that holds its heads' alphas.
HEAD_ALPHA = "head_alpha"
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
    return transformers_compat.collecting_attentions()


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
        options = AttentionOptions(causal=causal, window=kwargs.get("sliding_window"), scale=scaling,
                                   dropout=dropout if module.training else 0.0, length_scale=length_scale)
        output, probs = attend(
            query, key, value, normalizer, alpha=head_alpha() if normalizer.learned else None,
            alpha_min=head_alpha.alpha_min if normalizer.learned else ALPHA_MIN, options=options, mask=mask,
            need_weights=_wants_weights(module, kwargs))
        return output.transpose(1, 2).contiguous(), probs

    attend_in_transformers.__name__ = f"{name}_attention_forward"
    attend_in_transformers.__doc__ = (f"Eager attention with its softmax replaced by the {name} normaliser "
                                      "(fairseq_sparse.hf).")
    return attend_in_transformers


def serves(model_class):
    """Whether ``model_class`` computes its attention through transformers' attention
    interface, so that a registered name reaches it."""
    return transformers_compat.uses_attention_interface(model_class)


def refuse_unserved(model_class, requested_attention):
    """A ValueError where ``requested_attention`` is a normaliser's name and ``model_class``'s
    attention does not go through the interface: transformers accepts any registered name for
    any model, and such a model (DeBERTa-v2, Bloom) would record the name and stay softmax, or
    fail later with a KeyError (Falcon)."""
    if requested_attention in normalizer_names() and not serves(model_class):
        raise ValueError(f"attn_implementation={requested_attention!r}: {model_class.__name__} computes its "
                         "attention in its own code, not through transformers' attention interface, so its "
                         "heads would stay softmax; fairseq_sparse.hf serves the models that use the interface "
                         "(BERT, RoBERTa, DistilBERT, Llama, Qwen2, GPT-2, ...)")


def register_attention():
    """Register every normaliser of the registry as an attention implementation, with the
    eager attention's mask function, through transformers' public interfaces (idempotent)."""
    for name in normalizer_names():
        AttentionInterface.register(name, attention_function(name))
        AttentionMaskInterface.register(name, eager_mask)


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
