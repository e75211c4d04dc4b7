"""The fixes fairseq needs for this plugin: one table (``PATCHES``), each fix narrow,
documented in its module and tested, and applied only where the installed fairseq has
the bug it fixes.

Every entry says what it rebinds, why, and which fairseq releases it was written for
(``FAIRSEQ_RELEASES``); on another release a fix is applied only where probing the
behaviour shows the bug (``batching``), and otherwise left out with a warning naming it,
since rebinding the internals of an unknown release could break more than it mends.
``FAIRSEQ_SPARSE_NO_COMPAT=1`` turns every fix off, to tell a fairseq behaviour from
one of ours.

Nothing is patched on importing this module: every research line's ``__init__`` calls
:func:`apply` before importing its modules (fairseq's ``--user-dir`` imports all four), in the
order of ``PATCHES``; ``import fairseq_sparse.entmax`` or ``fairseq_sparse.hf`` applies nothing.
"""

import dataclasses
import importlib
import logging
import os
import sys
from typing import Callable, Optional, Tuple

logger = logging.getLogger(__name__)

# The fairseq releases every fix was written and tested against: the last official
# release and the ``ve-fairseq`` build of its main branch that the package installs.
FAIRSEQ_RELEASES = ("0.12.2", "0.12.3")
# Set to 1 to apply no fix at all.
NO_COMPAT = "FAIRSEQ_SPARSE_NO_COMPAT"


@dataclasses.dataclass(frozen=True)
class Patch:
    """One fix: ``module`` (in this package, with an ``apply()``), what it rebinds, why, and
    optionally ``has_bug``, a probe of the installed fairseq used on releases outside
    FAIRSEQ_RELEASES (None: the fix is left out there)."""
    module: str
    rebinds: Tuple[str, ...]
    why: str
    has_bug: Optional[Callable[[], bool]] = None


def _batch_by_size_drops_the_last_batch():
    import numpy as np
    from fairseq.data import data_utils

    fairseqs_own = getattr(data_utils.batch_by_size, "__wrapped__", data_utils.batch_by_size)  # if already fixed
    batches = fairseqs_own(np.arange(9), lambda i: 1, max_sentences=8, required_batch_size_multiple=8)
    return sum(len(b) for b in batches) < 9


def _log_file_gets_a_handler_per_progress_bar():
    from .log_file import adds_a_handler_per_progress_bar

    return adds_a_handler_per_progress_bar()


PATCHES = (
    Patch("checkpoints", ("torch.serialization's weights-only allow-list", "checkpoint_utils._upgrade_state_dict"),
          "fairseq checkpoints load under torch >= 2.6 (weights_only) without turning pickle safety off, and the "
          "options of older checkpoints move to where this package reads them"),
    Patch("batching", ("data_utils.batch_by_size", "FairseqTask.get_batch_iterator"),
          "the last, incomplete batch of every split is kept (after 0.12.2 fairseq drops it), and a resumed run "
          "gets the batches of an uninterrupted one", _batch_by_size_drops_the_last_batch),
    Patch("trainer_state", ("Trainer.state_dict", "Trainer.save_checkpoint", "Trainer.load_checkpoint"),
          "what a resumed run needs travels in the checkpoint: the buffers of a criterion without parameters and the "
          "--patience count; another run's checkpoint is named in the error"),
    Patch("precision", ("distributed_utils.call_main", "AMPOptimizer.__init__", "FairseqTask.train_step"),
          "--fp16 / --bf16 without a GPU is a plain error, and --amp trains in bfloat16 there instead of silently "
          "in float32"),
    Patch("checkpoint_files", ("checkpoint_utils.torch_persistent_save", "checkpoint_utils.PathManager",
                               "checkpoint_utils.load_checkpoint_to_cpu"),
          "every checkpoint file is written atomically, and a torn one is named with the whole checkpoint to "
          "resume from"),
    Patch("quiet", ("warnings' filters",),
          "fairseq's stack prints twenty lines of known-harmless warnings (Hydra's deprecations, pin_memory "
          "without an accelerator, torch.cuda.amp.autocast) before every command: each is silenced by its "
          "message and module, so that the warnings that matter are seen", lambda: True),
    Patch("prefetch", ("iterators.BackgroundConsumer.run", "an atexit hook"),
          "a finished run exits cleanly instead of aborting on fairseq's prefetching thread"),
    Patch("log_file", ("progress_bar.progress_bar",),
          "with --log-file, each epoch's progress bar attached another handler for the same file, so every line a "
          "progress bar logs was written once more per epoch gone by", _log_file_gets_a_handler_per_progress_bar),
    Patch("generation", ("SequenceGenerator.__init__",),
          "a hypothesis that no token can continue (a sparse output layer at the length limit) ends with a score "
          "below every other, instead of fairseq-generate failing with `AssertionError: 200 < 200`"),
    Patch("train_runs", ("fairseq_cli.train.main", "fairseq_cli.train.train"),
          "one live fairseq-train run per --save-dir, rerunning a finished run (or one stopped at its plateau) "
          "trains nothing, and a --restore-file that does not exist is an error, not a run from scratch"),
)

_applied = None


def applies(patch, version):
    """(whether ``patch`` is applied under fairseq ``version``, why not if it is not)."""
    if version in FAIRSEQ_RELEASES:
        return True, None
    if patch.has_bug is not None:
        if patch.has_bug():
            return True, None
        return False, f"fairseq {version} does not have the bug it fixes (probed)"
    return False, (f"written for fairseq {' and '.join(FAIRSEQ_RELEASES)}, not {version}: its internals may have "
                   "changed")


def import_fairseq():
    """``import fairseq``, leaving the root logger as it was found (level and handlers).

    Importing fairseq runs ``logging.basicConfig(level=DEBUG)`` (in
    fairseq/models/wav2vec/wav2vec2_classification.py): the root logger would go to DEBUG with a
    stderr handler, and a program that had not configured logging would print every library's
    debug lines.  fairseq's CLIs configure logging before importing fairseq (the basicConfig is
    then a no-op), so their logging is unchanged."""
    if "fairseq" in sys.modules:
        return sys.modules["fairseq"]
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        import fairseq
    finally:
        root.setLevel(level)
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
    return fairseq


def apply():
    """Apply the fixes that the installed fairseq needs (idempotent); returns the names of
    those applied."""
    global _applied
    if _applied is not None:
        return _applied
    fairseq = import_fairseq()
    if os.environ.get(NO_COMPAT, "") not in ("", "0"):
        logger.warning("%s is set: no fairseq fix is applied (%s)", NO_COMPAT, ", ".join(p.module for p in PATCHES))
        _applied = ()
        return _applied
    version = getattr(fairseq, "__version__", "unknown")
    applied = []
    for patch in PATCHES:
        ok, why_not = applies(patch, version)
        if not ok:
            logger.warning("fairseq_sparse.compat.%s not applied: %s (%s)", patch.module, why_not, patch.why)
            continue
        importlib.import_module(f"{__name__}.{patch.module}").apply()
        applied.append(patch.module)
    _applied = tuple(applied)
    return _applied
