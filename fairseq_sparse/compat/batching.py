"""Two fixes to fairseq's batching: keep the last batch that ``batch_by_size``
silently drops, and give a resumed run the batches an uninterrupted run has.

fairseq after 0.12.2 (so the ``ve-fairseq`` build we depend on) ends
``fairseq.data.data_utils.batch_by_size`` with

    if bsz_mult > 1 and len(b[-1]) % bsz_mult != 0:
        b = b[:-1]

With the default ``--required-batch-size-multiple 8`` this throws away the last,
incomplete batch of every split (with ``--max-tokens``, a batch of the longest
examples): training never sees them, validation covers less than the split, and
``fairseq-generate`` silently translates only part of a test set (we saw 16 of
20 sentences), so corpus BLEU and TER are computed on the wrong set.  We restore 0.12.2's behaviour: the remainder is the
final batch.  :func:`apply` (called once by the plugin's ``__init__``) applies both fixes.
"""

import functools

import numpy as np
from fairseq.data import data_utils
from fairseq.tasks import FairseqTask

_original = data_utils.batch_by_size
_original_get_batch_iterator = FairseqTask.get_batch_iterator


@functools.wraps(_original)
def batch_by_size(indices, *args, **kwargs):
    batches = _original(indices, *args, **kwargs)
    if kwargs.get("fixed_shapes") is not None:
        return batches
    indices = np.asarray(indices) if not isinstance(indices, np.ndarray) else indices
    covered = sum(len(b) for b in batches)
    # Batches are consecutive slices of `indices`; only the last one can be missing.
    if covered < len(indices):
        batches = list(batches) + [np.asarray(indices[covered:], dtype=np.int64)]
    return batches


# A resumed run must see the batches an uninterrupted run sees.  fairseq builds the
# batches once, when the training iterator is first made, ordering equal-length
# examples by a shuffle seeded with ``seed + epoch``; an uninterrupted run makes it
# at epoch 1 and reuses it, but a run resumed at epoch N makes it at epoch N, so
# examples of equal length land in other batches and the resumed run drifts from
# the uninterrupted one from its first update.  Unless batches are rebuilt every
# epoch anyway (``rebuild_batches``), build them as at epoch 1, then move the
# iterator to the epoch asked for (its per-epoch shuffle still uses that epoch).
@functools.wraps(_original_get_batch_iterator)
def get_batch_iterator(self, dataset, *args, epoch=1, **kwargs):
    if epoch <= 1 or getattr(self.cfg, "rebuild_batches", False) or dataset in self.dataset_to_epoch_iter:
        return _original_get_batch_iterator(self, dataset, *args, epoch=epoch, **kwargs)
    iterator = _original_get_batch_iterator(self, dataset, *args, epoch=1, **kwargs)
    dataset.set_epoch(epoch)
    iterator.epoch = epoch
    return iterator


def apply():
    """Patch fairseq's ``batch_by_size`` and ``FairseqTask.get_batch_iterator`` (idempotent)."""
    data_utils.batch_by_size = batch_by_size
    FairseqTask.get_batch_iterator = get_batch_iterator
