"""fairseq-sparse: a fairseq plugin (``--user-dir fairseq_sparse``).

One package per research line over a shared core:

- :mod:`.sparse_transformer`: adaptively sparse transformers (``entmax_transformer``), the
  entmax output loss, the attention report;
- :mod:`.ape`: automatic post-editing (``ape`` task, ``bert_ape``,
  ``dual_source_transformer``, ``--scoring ter``, :class:`~.ape.postedit.PostEditor`);
- :mod:`.latent`: sparse marginalisation of discrete and structured latent variables;
- :mod:`.sentence_vae`: sparse sentence VAEs;
- the core: :mod:`.entmax` (the maths; torch only, usable without fairseq),
  :mod:`.modules` (the attention module, the per-head alpha, shared helpers) and
  :mod:`.compat` (the fixes fairseq needs).

:func:`load_plugin` applies the fairseq fixes and registers every task, model,
criterion and scorer.  It runs when fairseq loads the plugin (``--user-dir``), when
the package is imported after fairseq, and when any research line is imported
(``from fairseq_sparse.ape.postedit import PostEditor`` is ready to load a
checkpoint), and when fairseq is imported after the package.  ``import
fairseq_sparse.entmax`` on its own imports torch alone and patches nothing.
"""

import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

_loaded = False


def load_plugin():
    """Apply the fairseq fixes (:mod:`.compat`) and register every task, model, criterion
    and scorer of the four research lines (idempotent)."""
    global _loaded
    if _loaded:  # already loaded, or loading (a research line's __init__ calls back here)
        return
    _loaded = True
    import logging

    # Importing fairseq runs ``logging.basicConfig(level=DEBUG)`` (in
    # fairseq/models/wav2vec/wav2vec2_classification.py): the root logger goes to DEBUG
    # with a stderr handler, and a program that had not configured logging would print
    # every library's debug lines.  The root logger is left as it was found, level and
    # handlers; fairseq's CLIs configure it before importing fairseq (the basicConfig
    # above is then a no-op), so their logging is unchanged.
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    from . import compat

    compat.apply()
    from . import ape, latent, sentence_vae, sparse_transformer  # noqa: F401  (registration)

    root.setLevel(level)
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)


def _importing_a_module_of_ours():
    return any(getattr(getattr(module, "__spec__", None), "_initializing", False)
               for name, module in list(sys.modules.items()) if name.startswith(__name__ + "."))


class _LoadWithFairseq(importlib.abc.MetaPathFinder):
    """Loads the plugin right after ``fairseq`` itself is imported, so that ``import
    fairseq_sparse`` before fairseq is enough (e.g. for ``checkpoint_utils`` to read this
    plugin's checkpoints).  It imports nothing until then: ``fairseq_sparse.entmax`` alone
    stays free of fairseq."""

    def find_spec(self, name, path=None, target=None):
        if name != "fairseq" or _loaded:
            return None
        sys.meta_path.remove(self)  # found by the other finders, then watched as it executes
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            if _importing_a_module_of_ours():
                # A module of ours being imported imports fairseq: the research lines would import
                # it half-made.  The fixes alone (checkpoints load); each line registers itself
                # when imported.
                from . import compat

                compat.apply()
            else:
                load_plugin()

        spec.loader.exec_module = exec_module
        return spec


if "fairseq" in sys.modules:  # loaded by fairseq (--user-dir), or imported after it
    load_plugin()
elif not any(isinstance(finder, _LoadWithFairseq) for finder in sys.meta_path):
    sys.meta_path.insert(0, _LoadWithFairseq())
