"""Every use of ``transformers`` beyond its public interface, in one file: what an upgrade of
transformers is checked against.

Written and tested against transformers ``RELEASES`` (5.x).  Each private name is read here
only, through a function that says what it stands for, and each behind a probe: where the
installed release lacks it, the function falls back to what the public interface gives (and
says so in its docstring), and a patch is left out with a warning naming it.

The two patches of ``PreTrainedModel`` (:func:`patches`), applied by :func:`apply` when
``fairseq_sparse.hf`` is imported (:func:`fairseq_sparse.hf.register`), in this order:

- ``post_init``: a model whose config records a sparse normaliser (``config.fairseq_sparse``)
  gets its heads' alphas and length scales as soon as its modules exist, so that
  ``from_pretrained``, ``pipeline`` and ``Trainer`` checkpoints load the sparse model as it
  was saved.  transformers has no public hook between building a model and loading its
  weights; without it the saved alphas would be reported unexpected and the heads would run
  without them.
- ``get_correct_attn_implementation``: a normaliser's name is refused for a model whose
  attention does not go through the attention interface (transformers accepts any registered
  name for any model, which would then record it and stay softmax).

Imports torch and transformers, never fairseq.
"""

import dataclasses
import functools
import logging
from typing import Callable

import transformers
from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

RELEASES = ("5",)  # major versions written and tested against
_MARK = "_fairseq_sparse_patch"


def tested_release(version=None):
    """Whether ``version`` (the installed transformers by default) is a release in RELEASES."""
    version = version or transformers.__version__
    return version.split(".")[0] in RELEASES


def collecting_attentions():
    """Whether transformers 5's output capturing is collecting attention weights
    (``output_attentions`` given to the model, collected by hooks rather than passed to the
    attention call).  Private: ``transformers.utils.output_capturing._active_collector``;
    False where it is missing (the call's own ``output_attentions`` then says it)."""
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:
        return False
    return any("attentions" in key for key in (_active_collector.get() or {}))


def uses_attention_interface(model_class):
    """Whether ``model_class`` computes its attention through transformers' attention
    interface, so that a registered name reaches it.  Private: the class's
    ``_can_set_attn_implementation()``, else its flag ``_supports_attention_backend``."""
    test = getattr(model_class, "_can_set_attn_implementation", None)
    return bool(test()) if test is not None else bool(getattr(model_class, "_supports_attention_backend", False))


def attn_implementation(model):
    """The attention implementation ``model`` runs with (``sdpa``, ``eager``, a registered
    name).  Private: ``config._attn_implementation``, which ``set_attn_implementation``
    writes; the public ``config.attn_implementation`` where it is missing."""
    config = model.config
    return getattr(config, "_attn_implementation", None) or getattr(config, "attn_implementation", None)


def keep_in_float32(model, module_name):
    """Have ``from_pretrained`` load the submodules named ``module_name`` in float32 whatever
    ``dtype`` the model is loaded in.  Private: ``_keep_in_fp32_modules_strict`` (also keeps
    them out of low-precision initialisation); the public class attribute
    ``_keep_in_fp32_modules`` is per class, not per model."""
    model._keep_in_fp32_modules_strict = set(getattr(model, "_keep_in_fp32_modules_strict", None) or ()) | {
        module_name}


@dataclasses.dataclass(frozen=True)
class Patch:
    """One patch: the ``PreTrainedModel`` method it wraps, why, and ``wrap(method) -> method``."""
    method: str
    why: str
    wrap: Callable


def _after_post_init(add):
    def wrap(post_init):
        @functools.wraps(post_init)
        def with_sparse_heads(self):
            post_init(self)
            add(self)

        return with_sparse_heads

    return wrap


def _checked_choice(refuse):
    def wrap(choose):
        @functools.wraps(choose)
        def checked(self, requested_attention, *args, **kwargs):
            refuse(type(self), requested_attention)
            return choose(self, requested_attention, *args, **kwargs)

        return checked

    return wrap


def patches(add_sparse_heads, refuse_implementation):
    """The patches in the order :func:`apply` applies them: ``add_sparse_heads(model)`` runs
    after every model's ``post_init``; ``refuse_implementation(model_class, name)`` raises for
    a name the class cannot serve before transformers chooses it."""
    return (
        Patch("post_init", "a saved sparse model loads with its heads' alphas and length scales",
              _after_post_init(add_sparse_heads)),
        Patch("get_correct_attn_implementation", "a normaliser is refused for a model whose attention does not "
              "go through the attention interface", _checked_choice(refuse_implementation)),
    )


def apply(table):
    """Apply each patch of ``table`` once (idempotent) where the installed transformers has its
    method, with a warning on a release outside RELEASES (left out, a sparse model would load
    as softmax); a missing method is left out with a warning naming it.  Returns the methods
    patched."""
    applied = []
    for patch in table:
        method = getattr(PreTrainedModel, patch.method, None)
        if method is None:
            logger.warning("fairseq_sparse.hf: transformers %s has no PreTrainedModel.%s: not patched, so %s no "
                           "longer holds", transformers.__version__, patch.method, patch.why)
            continue
        if not getattr(method, _MARK, False):
            if not tested_release():
                logger.warning("fairseq_sparse.hf: PreTrainedModel.%s patched on transformers %s, a release it was "
                               "not tested on (%s)", patch.method, transformers.__version__, patch.why)
            patched = patch.wrap(method)
            setattr(patched, _MARK, True)
            setattr(PreTrainedModel, patch.method, patched)
        applied.append(patch.method)
    return tuple(applied)
