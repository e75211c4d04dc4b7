"""fairseq's prefetching threads are stopped before the interpreter exits, so a run that
has finished cannot abort (``terminate called without an active exception``, exit 134).

fairseq wraps every epoch iterator in a ``BufferedIterator`` whose daemon thread,
``BackgroundConsumer``, keeps collating batches ahead of the trainer: after
``--max-update`` or ``--max-valid-steps`` it is still filling its buffer when
``fairseq-train`` returns.  When the interpreter finalises, a daemon thread that comes
back from a torch operator (which ran with the GIL released) and asks for the GIL is
ended with ``pthread_exit``; unwinding through torch's C++ frames then calls
``std::terminate`` and the whole process aborts, after its last checkpoint but with a
failing exit status and the tail of its buffered log lost.  It depends on timing: CI
saw it once on a three-update run, and a daemon thread doing matrix products aborts
the process at every exit.

At exit (``atexit`` runs before finalisation) each consumer is told to stop after the
batch it is making, its buffer is drained so that it is never blocked on a full queue,
and it is joined.  While the run goes on nothing changes.
"""

import atexit
import functools
import queue
import threading
import time

from fairseq.data import iterators

_original_run = iterators.BackgroundConsumer.run
_exiting = threading.Event()
# A consumer making one batch is waited for this long; past it the exit goes on as
# before (one batch of any task here collates in well under a second).
JOIN_SECONDS = 30.0


def _until_exit(source):
    for item in source:
        if _exiting.is_set():
            return  # the batch is dropped: nothing will read it
        yield item


@functools.wraps(_original_run)
def run(self):
    self._source = _until_exit(self._source)
    _original_run(self)


def _drain(buffer):
    try:
        while True:
            buffer.get_nowait()
    except queue.Empty:
        pass


def stop_consumers(timeout=JOIN_SECONDS):
    """Stop every live ``BackgroundConsumer`` and wait for it (registered with ``atexit``)."""
    _exiting.set()
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if not isinstance(thread, iterators.BackgroundConsumer):
            continue
        while thread.is_alive() and time.monotonic() < deadline:
            _drain(thread._queue)
            thread.join(0.01)


def apply():
    """Called once, by :func:`fairseq_sparse.compat.apply`."""
    iterators.BackgroundConsumer.run = run
    atexit.register(stop_consumers)
