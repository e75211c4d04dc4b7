"""fairseq-sparse: a fairseq plugin (``--user-dir fairseq_sparse``).

Importing the package makes fairseq checkpoints loadable on torch >= 2.6, stops
fairseq from dropping the last batch of every split, checkpoints the state of
criteria that have buffers but no parameters, and registers every task, model,
criterion and scorer it defines.
"""

import logging
import os

# Importing fairseq runs ``logging.basicConfig(level=DEBUG)`` (in
# fairseq/models/wav2vec/wav2vec2_classification.py), so any program that imports
# it before configuring logging itself prints every library's debug lines
# (matplotlib's font lookups, ...).  fairseq's CLIs configure logging first and are
# unaffected; for everything else the root logger is put back to what those CLIs
# use: $LOGLEVEL, INFO by default.
_root_level = logging.getLogger().level

from . import checkpoint_compat  # noqa: E402,F401  (must run before any checkpoint is loaded)
from . import batching_fix  # noqa: E402,F401  (fairseq drops the last batch of every split)
from . import criterion_state_fix  # noqa: E402,F401  (fairseq checkpoints no criterion without parameters)
from . import entmax  # noqa: E402,F401
from . import criterions, models, scoring, tasks  # noqa: E402,F401  (registration)

if logging.getLogger().level < _root_level:
    logging.getLogger().setLevel(os.environ.get("LOGLEVEL", "INFO").upper())

__version__ = "0.1.0"
