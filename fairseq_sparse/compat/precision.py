"""Precision without a GPU: ``--fp16`` / ``--bf16`` a plain error, ``--amp`` in bfloat16.

fairseq's CLIs accept ``--fp16`` / ``--bf16`` on a machine without CUDA (or with
``--cpu``) and then fail deep inside (a model in half precision on CPU, an optimizer
that needs CUDA).  Every CLI runs its main through ``distributed_utils.call_main``
(looked up at call time, after the plugin is loaded by ``--user-dir``), so the check
goes there, before anything is built.

``--amp`` on CPU is accepted by fairseq and does nothing: its autocast is CUDA's, and its
loss scaler disables itself without CUDA (with a warning), so training silently stays in
float32.  Here it means what it means on a GPU, mixed precision, in the CPU's half type:
the forward pass and the loss of each training step run under ``torch.autocast("cpu",
dtype=torch.bfloat16)`` (matrix products in bfloat16 with float32 sums, the weights, their
gradients and the optimizer in float32; the backward pass outside autocast, as PyTorch
asks), and the loss is scaled by ``torch.amp.GradScaler("cpu")`` as fairseq scales it on
CUDA (``--fp16-init-scale``, halved on overflow), so a step with a non-finite gradient is
retried and then skipped, never applied.  bfloat16 has float32's range, so the scale
rarely moves; the scaler is there for that guarantee.  Validation and generation stay in
float32, as with ``--amp`` on CUDA.
Why: on a CPU with bfloat16 instructions (AVX512-BF16 or AMX) its matrix products run
faster than float32's, and so does training (docs/notes/stack.md#mixed-precision-on-cpu has the measurements).
"""

import functools
import logging
import warnings

import torch
from fairseq.distributed import utils as distributed_utils
from fairseq.optim.amp_optimizer import AMPOptimizer
from fairseq.tasks.fairseq_task import FairseqTask

from ..entmax.torch_compat import cpu_has_bfloat16

logger = logging.getLogger(__name__)

_original = distributed_utils.call_main
_amp_init = AMPOptimizer.__init__
_train_step = FairseqTask.train_step


def check_precision(cfg):
    common = cfg.common
    asked = [option for option, on in (("--fp16", common.fp16), ("--bf16", common.bf16)) if on]
    if asked and on_cpu(common):
        where = "--cpu is given" if common.cpu else "this machine has no CUDA GPU"
        raise ValueError(f"{' and '.join(asked)}: half-precision training and generation need a CUDA GPU, and "
                         f"{where}; leave {' and '.join(asked)} out to run in float32")
    if common.amp and on_cpu(common):
        logger.info("--amp on CPU: training's forward pass and loss under bfloat16 autocast, weights, gradients "
                    "and the optimizer in float32, the loss scaled as on CUDA; validation in float32")
        if cpu_has_bfloat16() is False:
            logger.warning("--amp: this CPU has no bfloat16 support in oneDNN, so bfloat16 products are emulated "
                           "and likely slower than float32; leave --amp out")


def on_cpu(common):
    """Whether fairseq trains on the CPU (its own rule: --cpu, or no CUDA)."""
    return common.cpu or not torch.cuda.is_available()


@functools.wraps(_original)
def call_main(cfg, main, **kwargs):
    check_precision(cfg)
    return _original(cfg, main, **kwargs)


@functools.wraps(_amp_init)
def amp_init(self, cfg, params, fp32_optimizer, **kwargs):
    if not on_cpu(cfg.common):
        return _amp_init(self, cfg, params, fp32_optimizer, **kwargs)
    # fairseq builds CUDA's scaler, which turns itself off without CUDA (warning that it does):
    # then a step whose gradient is not finite would be applied.  The CPU's scaler, same
    # settings, skips it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _amp_init(self, cfg, params, fp32_optimizer, **kwargs)
    # The growth interval is --amp-scale-window (fairseq passes --amp-init-scale there, a slip).
    window = getattr(cfg.common, "amp_scale_window", None)
    self._grad_scaler = torch.amp.GradScaler("cpu", init_scale=cfg.common.fp16_init_scale,
                                             **({} if window is None else {"growth_interval": window}))
    self.cpu_autocast = True  # what train_step reads: the device is decided here, once


class AutocastCriterion:
    """A criterion called under CPU bfloat16 autocast: the step's forward pass and loss, not its
    backward (which ``FairseqTask.train_step`` runs after the call returns)."""

    def __init__(self, criterion):
        self.criterion = criterion

    def __call__(self, model, sample, *args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.criterion(model, sample, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.__dict__["criterion"], name)


@functools.wraps(_train_step)
def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False, **kwargs):
    if not getattr(optimizer, "cpu_autocast", False):
        return _train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad, **kwargs)
    with warnings.catch_warnings():
        # fairseq's own CUDA autocast around the criterion says it is disabling itself; ours is on.
        warnings.filterwarnings("ignore", message="CUDA is not available or torch_xla is imported")
        return _train_step(self, sample, model, AutocastCriterion(criterion), optimizer, update_num, ignore_grad,
                           **kwargs)


def apply():
    distributed_utils.call_main = call_main
    AMPOptimizer.__init__ = amp_init
    FairseqTask.train_step = train_step
