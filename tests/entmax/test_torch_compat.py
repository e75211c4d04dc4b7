"""fairseq_sparse.entmax.torch_compat against the public torch it stands for."""

import torch

from fairseq_sparse.entmax import torch_compat
from fairseq_sparse.entmax.activations import current_backend, use_backend


def test_this_torch_is_a_release_written_for():
    assert torch_compat.tested_release(), f"torch {torch.__version__}: check torch_compat.py against it"
    assert not torch_compat.tested_release("3.0.0")


def test_the_constant_mark_is_what_torchs_own_decorator_sets():
    """The attribute is the decorator's whole effect on a function, so marking it directly
    is the public decorator without its import."""
    def ours():
        return 0

    def theirs():
        return 0

    assert torch_compat.assume_constant_result(ours) is ours
    assert torch.compiler.assume_constant_result(theirs) is theirs
    assert vars(ours) == vars(theirs) == {"_dynamo_marked_constant": True}


def test_a_compiled_graph_takes_the_backend_of_the_thread_that_compiled_it_as_a_constant():
    """With fullgraph=True the context variable behind current_backend would fail the
    trace unless the compiler takes the function's result as a constant."""
    @torch.compile(backend="eager", fullgraph=True)
    def scaled(x):
        return x * (2 if current_backend() == "torch" else 3)

    x = torch.ones(2)
    with use_backend("torch"):
        assert scaled(x).tolist() == [2.0, 2.0]


def test_cpu_bfloat16_support_is_a_yes_a_no_or_unknown():
    assert torch_compat.cpu_has_bfloat16() in (True, False, None)
