"""fairseq-sparse: a fairseq plugin (``--user-dir fairseq_sparse``).

One package per research line over a shared core:

- :mod:`.sparse_transformer`: adaptively sparse transformers (``entmax_transformer``,
  ``entmax_transformer_lm``), the entmax output loss, the length-extrapolation tasks, the
  attention report;
- :mod:`.ape`: automatic post-editing (``ape`` task, ``bert_ape``,
  ``dual_source_transformer``, ``--scoring ter``, :class:`~.ape.postedit.PostEditor`);
- :mod:`.latent`: sparse marginalisation of discrete and structured latent variables;
- :mod:`.sentence_vae`: sparse sentence VAEs;
- the core: :mod:`.entmax` (the maths; torch only, usable without fairseq),
  :mod:`.modules` (the attention module, the sparse transformer every encoder-decoder builds
  on, shared helpers), :mod:`.compat` (the fixes fairseq needs) and :mod:`.hf` (sparse
  attention in Hugging Face models; no fairseq).

How the plugin loads, as fairseq's plugin examples do, with no import hook:

- ``--user-dir fairseq_sparse``: fairseq imports the package after itself, and the package
  registers every line (:func:`load_plugin`); so does ``import fairseq_sparse`` after fairseq;
- ``import fairseq_sparse.<line>`` registers that line's tasks, models, criteria and scorers
  (and applies :mod:`.compat`'s fixes, which its checkpoints need): ready to load the line's
  checkpoints with fairseq's own loaders, in a fresh process too; it loads no other line;
- ``import fairseq_sparse`` before fairseq, or ``import fairseq_sparse.entmax`` / ``.hf``,
  imports no fairseq and changes nothing of it; :func:`load_plugin` then registers every line.
"""

import sys

__version__ = "0.1.0"

LINES = ("sparse_transformer", "ape", "latent", "sentence_vae")


def load_plugin():
    """Register every task, model, criterion and scorer of the four research lines (each
    line's ``__init__`` applies the fairseq fixes first); idempotent, as imports are."""
    import importlib

    for line in LINES:
        importlib.import_module(f"{__name__}.{line}")


if "fairseq" in sys.modules:  # loaded by fairseq (--user-dir), or imported after it
    load_plugin()
