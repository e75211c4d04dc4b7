"""Checkpoint files that a kill cannot tear, and a clear error for one that is torn.

fairseq writes a checkpoint once (``torch_persistent_save``: to ``NAME.tmp``, then
renamed, but never flushed to disk) and then *copies* it to every other name it
keeps, ``checkpoint_last.pt`` included, with a plain file copy: a kill during that
copy leaves a torn ``checkpoint_last.pt`` (we saw 10 MB of 570 MB), and the next run
fails in torch's zip reader without naming the file.  Here every file is written
beside its final name, flushed and fsynced, then renamed over it (``os.replace``:
atomic on POSIX and Windows), so each name holds either the old checkpoint or the new
one; and a checkpoint that cannot be read is an error naming it and the newest other
checkpoint beside it that is whole, to resume from with ``--restore-file``.
"""

import functools
import os
import shutil
import uuid
import zipfile
from pathlib import Path

from fairseq import checkpoint_utils
from fairseq.file_io import PathManager

_original_load = checkpoint_utils.load_checkpoint_to_cpu
_original_save = checkpoint_utils.torch_persistent_save


def _is_local(path):
    return not PathManager.path_requires_pathmanager(str(path))


def _replace_atomically(path, write):
    """Call write(file) on a temporary file beside `path`, flush and fsync it, rename it to `path`."""
    staging = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with open(staging, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.remove(staging)
        raise


def torch_persistent_save(obj, filename, async_write: bool = False):
    if async_write or not isinstance(filename, (str, os.PathLike)) or not _is_local(filename):
        return _original_save(obj, filename, async_write)
    _replace_atomically(filename, lambda f: checkpoint_utils._torch_persistent_save(obj, f))



class AtomicCopyPathManager(PathManager):
    """fairseq's PathManager, whose copy of a local file is written and renamed atomically."""

    @staticmethod
    def copy(src_path, dst_path, overwrite=False):
        if not (_is_local(src_path) and _is_local(dst_path)):
            return PathManager.copy(src_path, dst_path, overwrite)
        if not overwrite and os.path.exists(dst_path):
            return False
        with open(src_path, "rb") as source:
            _replace_atomically(dst_path, lambda f: shutil.copyfileobj(source, f, 16 * 1024 * 1024))
        return True


def whole_checkpoints_beside(path):
    """Other checkpoints in `path`'s directory that are whole zip files, newest first;
    checkpoint_best.pt last (it is where validation peaked, not where training got to)."""
    path = Path(path)
    others = [p for p in path.parent.glob("*.pt") if p != path and zipfile.is_zipfile(p)]
    return sorted(others, key=lambda p: (p.name != "checkpoint_best.pt", p.stat().st_mtime), reverse=True)


@functools.wraps(_original_load)
def load_checkpoint_to_cpu(path, *args, **kwargs):
    try:
        return _original_load(path, *args, **kwargs)
    # A file that is no zip (a text file, say) reaches torch's legacy unpickler, which fails in
    # ways that depend on its first bytes (KeyError, UnpicklingError, IndexError, ...): every
    # failure of such a file is named here.
    except Exception as e:
        if not (_is_local(path) and os.path.isfile(path)) or zipfile.is_zipfile(path):
            raise  # a whole file failing for another reason: fairseq's own error stands
        good = whole_checkpoints_beside(path)
        hint = (f"the newest whole checkpoint beside it is {good[0]}: resume from it with --restore-file {good[0]}"
                if good else "no whole checkpoint is beside it")
        # Not torch's message: it advises weights_only=False, which would run code from an untrusted file.
        raise RuntimeError(f"{path}: torn or not a checkpoint ({os.path.getsize(path)} bytes, not a complete zip "
                           f"file as torch.save writes; was a save interrupted?); {hint}") from None


def load_for_task(path, task, user, overrides=None):
    """``load_checkpoint_to_cpu(path, overrides)``, checked to be a checkpoint trained with
    ``--task task`` before fairseq builds anything from it (its errors for another task's
    checkpoint name neither); ``user`` names what needs it in the error."""
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path), overrides)
    cfg = state.get("cfg")
    trained_with = cfg["task"].get("_name") if cfg is not None else getattr(state.get("args"), "task", None)
    if trained_with != task:
        raise ValueError(f"{path} was trained with --task {trained_with}, not --task {task}: {user} needs a "
                         f"{task} checkpoint")
    return state


def num_updates(path):
    """The updates a checkpoint was trained for (0 where it records none)."""
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))  # a torn or foreign file is named
    history = state.get("optimizer_history") or [{}]
    return history[-1].get("num_updates", 0)


def apply():
    checkpoint_utils.torch_persistent_save = torch_persistent_save
    checkpoint_utils.PathManager = AtomicCopyPathManager
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
