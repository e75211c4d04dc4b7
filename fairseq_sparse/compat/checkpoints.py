"""Load fairseq checkpoints under torch >= 2.6 without turning pickle safety off.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``: it unpickles
only tensors, containers and an allow-list of classes.  fairseq (including the
``ve-fairseq`` build we depend on) calls ``torch.load`` without arguments, so
``fairseq-train`` cannot resume and ``fairseq-generate`` cannot load its own
checkpoints.  Rather than passing ``weights_only=False`` (which would let any
checkpoint run code), we add exactly the classes a fairseq checkpoint holds to
torch's allow-list; everything else is still refused.

What a checkpoint holds (``fairseq.checkpoint_utils.save_checkpoint``): tensors,
dicts and lists; ``cfg`` as plain containers; ``args`` as an
``argparse.Namespace`` (legacy models and ``--user-dir`` architectures keep
their options there); and the metrics state, whose meters keep whatever value a
criterion logged, which may be a numpy scalar.

The same load passes every checkpoint through the plugin's own migrations
(:mod:`fairseq_sparse.checkpoint_migrations`), the one place where this plugin's older
checkpoints are brought up to date.
"""

import argparse
import functools

import numpy as np
import torch


def _numpy_scalar_globals():
    """The callables pickle uses to rebuild numpy scalars: data only, no code."""
    try:
        from numpy._core.multiarray import scalar  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import scalar
    dtype_classes = [type(np.dtype(t)) for t in (np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_)]
    return [scalar, np.dtype, *dtype_classes]


FAIRSEQ_CHECKPOINT_GLOBALS = [argparse.Namespace, *_numpy_scalar_globals()]


def apply():
    """Add the classes of fairseq checkpoints to torch's weights-only allow-list, and apply
    the plugin's migrations on loading (idempotent)."""
    from fairseq import checkpoint_utils

    from ..checkpoint_migrations import migrate

    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 loads with weights_only=False anyway
        add(FAIRSEQ_CHECKPOINT_GLOBALS)
    if not hasattr(checkpoint_utils._upgrade_state_dict, "__wrapped__"):
        original = checkpoint_utils._upgrade_state_dict

        @functools.wraps(original)
        def upgrade_state_dict(state):
            return migrate(original(state))

        checkpoint_utils._upgrade_state_dict = upgrade_state_dict
