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

Checkpoints of this plugin's older versions also keep options where those versions
declared them: ``--classification-weight`` (``ssvae``) and ``--nll-samples``
(``bitvector_vae``) were options of the ``latent_marginalization`` criterion and
are now the models' own.  fairseq rebuilds a criterion from a checkpoint's config
(``fairseq-validate``), which would fail on the unknown keys, so on loading they are
moved to the model's config (or dropped, for a model that has no such option).  The
sentence VAE's objectives ``vae``, ``vae_l1`` and ``vae_l2`` are now ``elbo``,
``elbo_l1`` and ``elbo_l2`` ("vae" names models): a checkpoint's criterion is renamed
on loading.
"""

import argparse
import functools

import numpy as np
import torch

# {criterion option that moved to a model: the model that owns it now}
MOVED_TO_MODEL = {"classification_weight": "ssvae", "nll_samples": "bitvector_vae"}
# {criterion's former name: its name now}
RENAMED_CRITERIA = {"vae": "elbo", "vae_l1": "elbo_l1", "vae_l2": "elbo_l2"}


def _numpy_scalar_globals():
    """The callables pickle uses to rebuild numpy scalars: data only, no code."""
    try:
        from numpy._core.multiarray import scalar  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import scalar
    dtype_classes = [type(np.dtype(t)) for t in (np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_)]
    return [scalar, np.dtype, *dtype_classes]


FAIRSEQ_CHECKPOINT_GLOBALS = [argparse.Namespace, *_numpy_scalar_globals()]


def move_options(state):
    """Move the options of MOVED_TO_MODEL from a checkpoint's criterion config to its model's,
    and give a criterion of RENAMED_CRITERIA its name now."""
    from omegaconf import open_dict

    cfg = state.get("cfg")
    criterion = cfg.get("criterion") if cfg is not None else None
    if criterion is not None and criterion.get("_name") in RENAMED_CRITERIA:
        with open_dict(criterion):
            criterion["_name"] = RENAMED_CRITERIA[criterion["_name"]]
    args = state.get("args")
    if getattr(args, "criterion", None) in RENAMED_CRITERIA:
        args.criterion = RENAMED_CRITERIA[args.criterion]
    if criterion is None or not any(option in criterion for option in MOVED_TO_MODEL):
        return state
    model = cfg.get("model")
    with open_dict(criterion):
        for option, owner in MOVED_TO_MODEL.items():
            if option not in criterion:
                continue
            value = criterion.pop(option)
            if model is not None and model.get("_name") == owner and option not in model:
                with open_dict(model):
                    model[option] = value
    return state


def apply():
    """Add the classes of fairseq checkpoints to torch's weights-only allow-list, and move
    the options of older checkpoints on loading (idempotent)."""
    from fairseq import checkpoint_utils

    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 loads with weights_only=False anyway
        add(FAIRSEQ_CHECKPOINT_GLOBALS)
    if not hasattr(checkpoint_utils._upgrade_state_dict, "__wrapped__"):
        original = checkpoint_utils._upgrade_state_dict

        @functools.wraps(original)
        def upgrade_state_dict(state):
            return move_options(original(state))

        checkpoint_utils._upgrade_state_dict = upgrade_state_dict
