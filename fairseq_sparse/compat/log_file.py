"""One handler per ``--log-file``: fairseq's ``progress_bar`` adds a ``logging.FileHandler``
for the log file to its module's logger every time a progress bar is made, which
fairseq-train does once an epoch.  Each line a progress bar logs (the training
statistics every ``--log-interval``, the epoch's and each validation's results) is then
written to the file once more per epoch gone by: the log grows with the square of the
epochs, a file descriptor leaks every epoch, and a reader of the file sees every result
repeated.

The fix hands fairseq's ``progress_bar`` no ``log_file`` when a handler for that file is
already attached to the progress bars' logger (or to the root logger, which their records
reach), so that the first progress bar attaches it and the later ones reuse it.
"""

import functools
import inspect
import logging
import os
import tempfile


def _attached(log_file, loggers):
    path = os.path.abspath(log_file)
    return any(isinstance(h, logging.FileHandler) and h.baseFilename == path
               for each in loggers for h in each.handlers)


def adds_a_handler_per_progress_bar():
    """Whether the installed fairseq's own ``progress_bar`` attaches a second handler for a
    log file that already has one (the probe leaves the logger as it found it)."""
    from fairseq.logging import progress_bar as module

    fairseqs_own = getattr(module.progress_bar, "__wrapped__", module.progress_bar)
    before = list(module.logger.handlers)
    with tempfile.TemporaryDirectory() as tmp:
        log_file = os.path.join(tmp, "probe.log")
        try:
            for _ in range(2):
                fairseqs_own([], log_format="none", log_file=log_file)
            added = [h for h in module.logger.handlers if h not in before]
            return len(added) > 1
        finally:
            for handler in module.logger.handlers[:]:
                if handler not in before:
                    module.logger.removeHandler(handler)
                    handler.close()


def apply():
    from fairseq.logging import progress_bar as module

    if hasattr(module.progress_bar, "__wrapped__"):
        return
    original = module.progress_bar
    signature = inspect.signature(original)

    @functools.wraps(original)
    def progress_bar(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        log_file = bound.arguments.get("log_file")
        if log_file is not None and _attached(log_file, (module.logger, logging.getLogger())):
            bound.arguments["log_file"] = None
        return original(*bound.args, **bound.kwargs)

    module.progress_bar = progress_bar
