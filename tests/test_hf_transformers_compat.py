"""The one file that reaches past transformers' public interface: its patches are applied once,
named, and the rest of the package reads no private name of transformers."""

import re

import pytest
from transformers import PreTrainedModel

import fairseq_sparse.hf as hf
from fairseq_sparse.hf import transformers_compat
from tests.conftest import REPO


def test_the_patches_are_applied_once_and_named():
    table = transformers_compat.patches(hf.add_recorded_heads, hf.refuse_unserved)
    assert [p.method for p in table] == ["post_init", "get_correct_attn_implementation"]
    before = {p.method: getattr(PreTrainedModel, p.method) for p in table}
    assert hf.register() == ("post_init", "get_correct_attn_implementation")  # again: nothing wrapped twice
    assert all(getattr(PreTrainedModel, name) is method for name, method in before.items())
    assert all(getattr(method, "_fairseq_sparse_patch", False) for method in before.values())
    assert transformers_compat.tested_release()
    assert not transformers_compat.tested_release("6.0.0")


def test_a_missing_method_is_left_out_with_a_warning(caplog):
    table = (transformers_compat.Patch("no_such_method", "a reason", lambda method: method),)
    assert transformers_compat.apply(table) == ()
    assert not hasattr(PreTrainedModel, "no_such_method")
    assert "has no PreTrainedModel.no_such_method: not patched, so a reason no longer holds" in caplog.text


# transformers' private names the package has read; only transformers_compat may.
PRIVATE = re.compile(r"\._(attn_implementation|keep_in_fp32_modules\w*|can_set_attn_implementation|"
                     r"supports_attention_backend)\b|_active_collector")


def test_no_other_module_reads_transformers_private_names():
    for path in sorted((REPO / "fairseq_sparse").rglob("*.py")):
        if path.name != "transformers_compat.py":
            assert not PRIVATE.search(path.read_text(encoding="utf-8")), path.relative_to(REPO)
