"""The known-harmless warnings of fairseq's stack are silenced narrowly (fairseq_sparse.compat.quiet)."""

import warnings

import pytest

import fairseq_sparse
fairseq_sparse.load_plugin()

from fairseq_sparse.compat import quiet  # noqa: E402
from fairseq_sparse.compat.quiet import HARMLESS  # noqa: E402

# What fairseq-train printed, each with the module it came from.
SEEN = [
    ("hydra.experimental.initialize() is no longer experimental. Use hydra.initialize()", UserWarning,
     "hydra.experimental.initialize"),
    ("\nThe version_base parameter is not specified.\nHydra will assume defaults for version 1.1.", DeprecationWarning,
     "hydra.experimental.initialize"),
    ("hydra.experimental.compose() is no longer experimental. Use hydra.compose()", UserWarning,
     "hydra.experimental.compose"),
    ("In 'config': Usage of deprecated keyword in package header '# @package _group_'.", UserWarning,
     "hydra.core.default_element"),
    ("\n'config' is validated against ConfigStore schema with the same name.\nThis behavior is deprecated", UserWarning,
     "sys"),
    ("\n'config' is validated against ConfigStore schema with the same name.\nThis behavior is deprecated", UserWarning,
     "__main__"),  # fairseq-generate's console script
    ("\nThe strict flag in the compose API is deprecated.\n", UserWarning, "hydra.compose"),
    ("'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used.",
     UserWarning, "torch.utils.data.dataloader"),
    ("`torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)` instead.",
     FutureWarning, "fairseq.tasks.fairseq_task"),
]


def shown(message, category, module):
    """How often the warning shows with the filters the plugin adds on top of the default ones
    (pytest replaces the filters around each test)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        quiet.apply()
        warnings.warn_explicit(message, category, f"{module.replace('.', '/')}.py", 1, module=module)
    return len(caught)


@pytest.mark.parametrize("message, category, module", SEEN)
def test_each_known_harmless_warning_is_silenced(message, category, module):
    assert shown(message, category, module) == 0


@pytest.mark.parametrize("message, category, module", SEEN)
def test_the_same_words_elsewhere_and_other_warnings_still_show(message, category, module):
    if "ConfigStore" not in message:  # Hydra's own words, wherever its stack level puts them
        assert shown(message, category, "my_package.train") == 1
    assert shown("something that matters", category, module) == 1


def test_every_filter_is_exercised():
    import re

    for pattern, category, module in HARMLESS:
        assert any(re.match(pattern, m, re.I) and issubclass(c, category) and re.match(module, mod)
                   for m, c, mod in SEEN), pattern
