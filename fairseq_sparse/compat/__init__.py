"""The fixes fairseq needs for this plugin, each narrow, documented and tested.

- :mod:`.checkpoints`: fairseq checkpoints load under torch >= 2.6 (``weights_only``)
  without turning pickle safety off;
- :mod:`.batching`: the last batch of every split is kept, and a resumed run gets the
  batches of an uninterrupted one;
- :mod:`.criterion_state`: a criterion with buffers but no parameters is checkpointed;
- :mod:`.precision`: ``--fp16`` / ``--bf16`` without a GPU is a plain error, and ``--amp``
  trains in bfloat16 there instead of silently in float32;
- :mod:`.checkpoint_files`: every checkpoint file is written atomically, and a torn
  one is named with the whole checkpoint to resume from;
- :mod:`.prefetch`: a finished run exits cleanly instead of aborting on fairseq's
  prefetching thread;
- :mod:`.train_runs`: one live ``fairseq-train`` run per ``--save-dir``, and rerunning a
  finished run trains nothing.

Nothing is patched on import: :func:`fairseq_sparse.load_plugin` calls :func:`apply`,
when fairseq loads the plugin (``--user-dir fairseq_sparse``) or a research line is
imported; ``import fairseq_sparse.entmax`` alone applies nothing.
"""

_applied = False


def apply():
    """Apply every fix (idempotent)."""
    global _applied
    if _applied:
        return
    from . import batching, checkpoint_files, checkpoints, criterion_state, precision, prefetch, train_runs

    checkpoints.apply()
    batching.apply()
    criterion_state.apply()
    precision.apply()
    checkpoint_files.apply()
    prefetch.apply()
    train_runs.apply()
    _applied = True
