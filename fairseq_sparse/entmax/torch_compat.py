"""Every use of ``torch`` beyond its public interface, in one file: what an upgrade of torch
is checked against.

Written and tested against torch ``RELEASES``.  Each private name is read or written here
only, through a function that says what it stands for, behind a probe: where the installed
torch is not a release of RELEASES, or lacks the name, the function does what the public
interface offers instead (and says so in its docstring).

Imports torch only.
"""

import torch

RELEASES = ("2",)  # major versions written and tested against


def tested_release(version=None):
    """Whether ``version`` (the installed torch by default) is a release in RELEASES."""
    return (version or torch.__version__).split(".")[0] in RELEASES


def assume_constant_result(fn):
    """``torch.compiler.assume_constant_result(fn)``: the compiler calls ``fn`` while it traces
    and keeps its result as a constant, rather than tracing into it.

    The public decorator imports ``torch._dynamo`` (the compiler's whole front end, nearly
    as long to import as torch) to set one attribute; this module is imported with every
    normaliser, by users who never compile.  So on RELEASES it sets that attribute itself,
    ``fn._dynamo_marked_constant`` (private; what ``torch._dynamo.decorators`` sets and
    ``torch._dynamo.variables.functions`` reads, checked against the decorator by
    tests/entmax/test_torch_compat.py); elsewhere it calls the decorator."""
    if not tested_release():
        return torch.compiler.assume_constant_result(fn)
    fn._dynamo_marked_constant = True
    return fn


def cpu_has_bfloat16():
    """Whether oneDNN computes bfloat16 natively on this CPU; None where the installed torch
    does not say.  torch's only test is private (``torch.ops.mkldnn._is_mkldnn_bf16_supported``,
    torch 2.x)."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(probe()) if probe is not None else None
    except RuntimeError:  # an op missing from this build
        return None
