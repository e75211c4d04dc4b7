"""Known-harmless warnings of fairseq's stack, silenced so that the ones that matter are seen.

Every fairseq command printed some twenty lines of them before its first log line: Hydra's
deprecations of the API fairseq 0.12 calls, torch's note that ``pin_memory`` does nothing
without an accelerator, and torch's deprecation of the ``torch.cuda.amp.autocast`` that
fairseq's train step calls.  None says anything a user of this plugin can act on.  Each
filter names its message, its category and (where Hydra's stack levels let it be known)
the module it is raised from, so the same words from another place, and every other
warning, still show.
"""

import warnings

# (message regex, category, module regex): warnings.filterwarnings' arguments.
HARMLESS = (
    (r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental", UserWarning, r"hydra\."),
    (r"\s*The version_base parameter is not specified", Warning, r"hydra\."),
    (r"In '\w+': Usage of deprecated keyword in package header", UserWarning, r"hydra\."),
    # Hydra raises this one with a stack level that lands in its caller (fairseq's, or the console
    # script's __main__): its own words name it.
    (r"\s*'\w+' is validated against ConfigStore schema with the same name", UserWarning, r""),
    (r"\s*The strict flag in the compose API is deprecated", UserWarning, r"hydra\."),
    (r"'pin_memory' argument is set as true but no accelerator is found", UserWarning, r"torch\.utils\.data\."),
    (r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated", FutureWarning, r"fairseq\."),
)


def apply():
    for message, category, module in HARMLESS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
