"""What reading a sparse model's attention needs: its weights on request
(:func:`evaluating`), its tokenizer (:func:`load_tokenizer`), whether it is causal, and
its attention density per layer (the attention report and the Trainer callback use them).

Imports torch and transformers, never fairseq.
"""

import contextlib
from pathlib import Path

import torch

from ..entmax.normalizers import normalizer_names
from . import transformers_compat
from .attention import attention_modules


@contextlib.contextmanager
def evaluating(model, weights=False):
    """Within it, ``model`` is in eval mode and, with ``weights``, gives its attention weights
    when asked (``output_attentions``): an implementation that computes none (``sdpa``, flash
    attention) is replaced by ``eager``, the same softmax.  Mode and implementation are
    restored after."""
    implementation, training = transformers_compat.attn_implementation(model), model.training
    if weights and implementation != "eager" and implementation not in normalizer_names():
        model.set_attn_implementation("eager")
    model.eval()
    try:
        yield model
    finally:
        model.train(training)
        if transformers_compat.attn_implementation(model) != implementation:
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
