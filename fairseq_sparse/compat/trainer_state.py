"""What fairseq's ``Trainer`` leaves out of a checkpoint, carried in its ``extra_state``: the one
patch of ``Trainer.state_dict``, ``Trainer.save_checkpoint`` and ``Trainer.load_checkpoint``.

- **A criterion's buffers.**  fairseq saves and restores ``criterion.state_dict()`` only when
  the criterion has parameters (``utils.has_parameters``: the same test that decides whether
  the criterion is wrapped for distributed training).  The estimators of ``--criterion
  latent_marginalization`` keep their state in buffers: the moving-average baselines of
  ``sfe`` and ``sum_and_sample``, the step that anneals the temperature of ``gumbel`` and
  ``st_gumbel``; a resumed run restarted those from zero.  Such a criterion's state travels
  under ``CRITERION_BUFFERS``, which every rank receives on loading, and is restored with it.
  Criteria with parameters are checkpointed by fairseq as before.
- **The --patience count** (:mod:`.train_runs`): saved under ``PATIENCE`` and restored where
  fairseq restores its best validation (not under ``--reset-optimizer`` or
  ``--reset-meters``), in a process that runs fairseq's train CLI.
- **Another run's checkpoint**: a ``checkpoint_last.pt`` of another task or architecture
  fails loading with an error that names the run that wrote it (:func:`.train_runs.another_run`).
"""

import logging

from fairseq import utils
from fairseq.trainer import Trainer

from . import train_runs

logger = logging.getLogger(__name__)

CRITERION_BUFFERS = "criterion_buffers"
# {"best": best validation, "num_runs": validations since}
PATIENCE = "patience"


def _has_only_buffers(criterion):
    return not utils.has_parameters(criterion) and any(True for _ in criterion.buffers())


def state_dict(self):
    """``Trainer.state_dict`` with the buffers of a criterion that has no parameters."""
    state = _fairseq_state_dict(self)
    criterion = self.get_criterion()
    if _has_only_buffers(criterion):
        state["extra_state"][CRITERION_BUFFERS] = criterion.state_dict()
    return state


def save_checkpoint(self, filename, extra_state):
    """``Trainer.save_checkpoint`` with the --patience count in ``extra_state``."""
    counter = train_runs.patience_counter()
    if getattr(counter, "best", None) is not None:
        extra_state = {**extra_state, PATIENCE: {"best": counter.best, "num_runs": counter.num_runs}}
    return _fairseq_save_checkpoint(self, filename, extra_state)


def load_checkpoint(self, filename, reset_optimizer=False, reset_lr_scheduler=False, optimizer_overrides=None,
                    reset_meters=False):
    """``Trainer.load_checkpoint``, restoring the criterion's buffers and the --patience count."""
    try:
        extra_state = _fairseq_load_checkpoint(self, filename, reset_optimizer, reset_lr_scheduler,
                                               optimizer_overrides, reset_meters=reset_meters)
    except Exception as e:
        if not str(e).startswith("Cannot load model parameters from checkpoint"):
            raise
        raise SystemExit(f"{e} {train_runs.another_run(filename, self.cfg)}") from None
    if extra_state is None:
        return extra_state
    _restore_criterion_buffers(self.get_criterion(), extra_state, filename)
    if not (reset_optimizer or reset_meters):
        _restore_patience(extra_state)
    return extra_state


def _restore_criterion_buffers(criterion, extra_state, filename):
    if not _has_only_buffers(criterion):
        return
    saved, expected = extra_state.get(CRITERION_BUFFERS), criterion.state_dict()
    if saved is not None and saved.keys() == expected.keys():
        criterion.load_state_dict(saved)
    else:  # a checkpoint from before this fix, or a run with another estimator (fine-tuning)
        held = f"another criterion state ({', '.join(saved)})" if saved is not None else "no criterion state"
        logger.warning(f"{filename} holds {held}: the buffers of {type(criterion).__name__} "
                       f"({', '.join(expected)}) start afresh")


def _restore_patience(extra_state):
    counter = train_runs.patience_counter()
    if counter is None:  # not fairseq's train CLI
        return
    if PATIENCE in extra_state:
        counter.best, counter.num_runs = extra_state[PATIENCE]["best"], extra_state[PATIENCE]["num_runs"]
    elif extra_state.get("best") is not None:
        # Written without the count: its best validation is known, not how many validations ago.
        counter.best, counter.num_runs = extra_state["best"], 0


# fairseq's own methods, kept when this module is first imported (before apply() replaces them).
_fairseq_state_dict = Trainer.state_dict
_fairseq_save_checkpoint = Trainer.save_checkpoint
_fairseq_load_checkpoint = Trainer.load_checkpoint


def apply():
    """Patch ``Trainer.state_dict``, ``Trainer.save_checkpoint`` and ``Trainer.load_checkpoint``
    (idempotent)."""
    Trainer.state_dict, Trainer.save_checkpoint, Trainer.load_checkpoint = state_dict, save_checkpoint, load_checkpoint
