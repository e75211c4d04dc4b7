"""Checkpoint the state of a criterion that keeps buffers but has no parameters.

fairseq's ``Trainer`` saves and restores ``criterion.state_dict()`` only when the
criterion has parameters (``utils.has_parameters``: the same test that decides
whether the criterion is wrapped for distributed training).  The estimators of
``--criterion latent_marginalization`` keep their state in buffers: the
moving-average baselines of ``sfe`` and ``sum_and_sample``, the step that anneals
the temperature of ``gumbel`` and ``st_gumbel``.  A resumed run restarted those from
zero and so did not continue the interrupted one (nvil, whose baseline network makes
it a criterion with parameters, resumed exactly; docs/stack.md).

Such a criterion's state now travels in the checkpoint's ``extra_state``, which
every rank receives on loading, and is restored with it.  Criteria with parameters
are checkpointed by fairseq as before.  :func:`apply` (called once by the plugin's
``__init__``) applies the fix.
"""

import logging

from fairseq import utils
from fairseq.trainer import Trainer

logger = logging.getLogger(__name__)

KEY = "criterion_buffers"


def _needs_fix(criterion):
    return not utils.has_parameters(criterion) and any(True for _ in criterion.buffers())


def state_dict(self):
    state = _original_state_dict(self)
    criterion = self.get_criterion()
    if _needs_fix(criterion):
        state["extra_state"][KEY] = criterion.state_dict()
    return state


def load_checkpoint(self, filename, *args, **kwargs):
    extra_state = _original_load_checkpoint(self, filename, *args, **kwargs)
    criterion = self.get_criterion()
    if extra_state is None or not _needs_fix(criterion):
        return extra_state
    saved, expected = extra_state.get(KEY), criterion.state_dict()
    if saved is not None and saved.keys() == expected.keys():
        criterion.load_state_dict(saved)
    else:  # a checkpoint from before this fix, or a run with another estimator (fine-tuning)
        held = f"another criterion state ({', '.join(saved)})" if saved is not None else "no criterion state"
        logger.warning(f"{filename} holds {held}: the buffers of {type(criterion).__name__} "
                       f"({', '.join(expected)}) start afresh")
    return extra_state


# fairseq's own methods, kept when this module is first imported (before apply() replaces them).
_original_state_dict = Trainer.state_dict
_original_load_checkpoint = Trainer.load_checkpoint


def apply():
    """Patch ``Trainer.state_dict`` and ``Trainer.load_checkpoint`` (idempotent)."""
    Trainer.state_dict, Trainer.load_checkpoint = state_dict, load_checkpoint
