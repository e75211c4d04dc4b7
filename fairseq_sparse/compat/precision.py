"""Half precision without a GPU: a plain error instead of fairseq's own crash.

fairseq's CLIs accept ``--fp16`` / ``--bf16`` on a machine without CUDA (or with
``--cpu``) and then fail deep inside (a model in half precision on CPU, an optimizer
that needs CUDA).  Every CLI runs its main through ``distributed_utils.call_main``
(looked up at call time, after the plugin is loaded by ``--user-dir``), so the check
goes there, before anything is built.
"""

import functools

import torch
from fairseq.distributed import utils as distributed_utils

_original = distributed_utils.call_main


def check_precision(cfg):
    common = cfg.common
    asked = [option for option, on in (("--fp16", common.fp16), ("--bf16", common.bf16)) if on]
    if asked and (common.cpu or not torch.cuda.is_available()):
        where = "--cpu is given" if common.cpu else "this machine has no CUDA GPU"
        raise ValueError(f"{' and '.join(asked)}: half-precision training and generation need a CUDA GPU, and "
                         f"{where}; leave {' and '.join(asked)} out to run in float32")


@functools.wraps(_original)
def call_main(cfg, main, **kwargs):
    check_precision(cfg)
    return _original(cfg, main, **kwargs)


def apply():
    distributed_utils.call_main = call_main
