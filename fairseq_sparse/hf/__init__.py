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
kernels instead (attention dropout in training included), where no weights are asked for.

``alpha_entmax`` learns one alpha per query head (Correia, Niculae & Martins, EMNLP 2019)
through the :class:`~fairseq_sparse.entmax.HeadAlpha` that :func:`sparsify` adds to each
attention module: a registered submodule, so the optimizer, ``state_dict`` and
``save_pretrained`` see it.  The choice is recorded in the model's config: the normaliser as
transformers' own ``attn_implementation`` (so that transformers builds the model with it, and
refuses it by name where this module is not imported, rather than loading softmax), and
``fairseq_sparse`` (alpha start, bound and floor), from which every model built from that
config gets its heads' alphas before transformers loads the weights: ``from_pretrained``,
``pipeline(model=...)`` and ``Trainer`` checkpoints load the sparse model as it was saved.
Importing this module registers the attention functions through transformers' public
interfaces and applies the two patches that transformers' lack of a public hook between
building a model and loading its weights leaves (:func:`register`): that loading, and the
refusal of models the interface does not serve, each a named, version-probed patch of
``PreTrainedModel`` in :mod:`.transformers_compat`, the one file that reaches past
transformers' public interface.

By job: :mod:`.attention` (the attention function and its registration), :mod:`.sparsify`
(sparsify, training, loading), :mod:`.report` (reading a model's attention), :mod:`.trainer`
(the Trainer callback), :mod:`.transformers_compat` (what transformers does not make public).  Under PEFT the alphas
train when the adapter's config names ``modules_to_save=["head_alpha"]`` (``PEFT_MODULES``).

Imports torch and transformers, never fairseq.
"""

from ..entmax.head_alpha import HeadAlpha  # noqa: F401  (for isinstance checks on a model's modules)
from .attention import (HEAD_ALPHA, LENGTH_SCALE, UNSUPPORTED, attention_function, attention_modules,  # noqa: F401
                        head_alpha_of, query_heads, refuse_unserved, register_attention, serves)
from .report import (TOKENIZER_FILES, attends_causally, attention_density_counts, evaluating,  # noqa: F401
                     load_tokenizer)
from .sparsify import (ALPHA_INIT, CONFIG_KEY, PEFT_MODULES, add_recorded_heads, attention_alphas,  # noqa: F401
                       from_pretrained, head_alphas, parameter_groups, register, set_num_updates, sparsify,
                       warn_if_alphas_frozen)
from .transformers_compat import attn_implementation  # noqa: F401

register()
