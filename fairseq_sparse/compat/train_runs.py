"""One live ``fairseq-train`` run per ``--save-dir``, and a finished run stays finished.

- fairseq lets two runs train into one ``--save-dir`` at once: each overwrites the
  other's checkpoints, both exit 0, and ``checkpoint_best.pt`` ends up recording a loss
  that neither run logged for the weights it holds.  Here the run that writes
  checkpoints (the master, unless ``--no-save``) holds an exclusive lock on
  ``SAVE_DIR/LOCK_NAME`` while it trains, the file naming its pid and host; a second
  run stops at once with an error naming the directory and the run that holds it.
  The lock is the operating system's (``flock``), so a run that is killed leaves no
  stale lock behind; the file is removed when the run ends.
- fairseq checks ``--max-update`` and ``--stop-time-hours`` only after an update, so
  rerunning a run that has reached either trains one more update and overwrites
  ``checkpoint_last.pt`` and ``checkpoint_best.pt``.  Here an epoch is not started when
  the loaded checkpoint is already there: the rerun trains nothing and writes nothing.
- fairseq counts ``--patience`` (validations since the best one) in memory only, so a
  resumed run counted afresh from its first validation and could train up to
  ``--patience`` epochs past the plateau that an uninterrupted run stops at.  Here the
  count travels in the checkpoint's ``extra_state`` (:mod:`.trainer_state`) and is restored with
  it, as fairseq restores its best validation (not under ``--reset-optimizer`` or
  ``--reset-meters``), and a run that stopped at its plateau is finished: its rerun
  trains nothing, unless given a larger ``--patience``.  A checkpoint written without
  the count resumes counting from its best validation.
- fairseq trains from scratch, with one INFO line, when ``--restore-file`` (or
  ``--continue-once``) names a file that does not exist.  A checkpoint the user named is
  one they mean to start from: here a missing one is an error naming the option.
- A ``--save-dir`` that holds another task's or architecture's ``checkpoint_last.pt`` (two
  examples run one after the other with fairseq's default ``checkpoints/``) failed with
  "please ensure that the architectures match"; here the error names the run that wrote
  it and says to give this run its own ``--save-dir``.
"""

import fcntl
import functools
import logging
import math
import os
import socket
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

LOCK_NAME = ".fairseq-train.lock"


class SaveDirInUse(RuntimeError):
    pass


def lock_save_dir(save_dir):
    """An open file holding the exclusive lock of ``save_dir`` (close it to release), or
    SaveDirInUse naming the directory and the run that holds it."""
    path = Path(save_dir) / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise SaveDirInUse(f"--save-dir {save_dir}: another fairseq-train run ({holder}) is training into it, "
                               f"and two runs would overwrite each other's checkpoints; give this run its own "
                               f"--save-dir, or wait for that one to end (lock: {path})") from None
        try:
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()  # locked a file that the run before removed as it ended: lock the new one
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    return handle


def release(handle):
    path = handle.name
    try:
        os.remove(path)  # still ours: removed before the lock is let go
    except FileNotFoundError:
        pass
    handle.close()


def finished(cfg, trainer):
    """Why the run loaded into ``trainer`` has nothing left to train, or None (always for a
    run that has trained no update yet: it trains at least one, as fairseq does)."""
    if trainer.get_num_updates() == 0:
        return None
    max_update = cfg.optimization.max_update or math.inf
    if trainer.get_num_updates() >= max_update:
        return f"it has reached --max-update {cfg.optimization.max_update}"
    hours = trainer.cumulative_training_time() / 3600
    if cfg.optimization.stop_time_hours > 0 and hours > cfg.optimization.stop_time_hours:
        return f"it has trained for {hours:.3f} h, past --stop-time-hours {cfg.optimization.stop_time_hours}"
    patience, runs = cfg.checkpoint.patience, getattr(patience_counter(), "num_runs", 0)
    if patience > 0 and runs >= patience:
        return (f"it stopped at its validation plateau, no better {cfg.checkpoint.best_checkpoint_metric} "
                f"in its last {runs} validations (--patience {patience})")
    return None


def patience_counter():
    """fairseq's ``should_stop_early`` of the train CLI running in this process, which keeps
    the --patience count in its own attributes (``best``, ``num_runs``); None outside one.
    :mod:`.trainer_state` saves and restores the count with the checkpoint."""
    return next((train_cli.should_stop_early for train_cli in _train_modules()), None)


DEFAULT_RESTORE_FILE = "checkpoint_last.pt"  # fairseq's default: SAVE_DIR's own, absent on a first run


def check_named_checkpoints(checkpoint_cfg):
    """A SystemExit naming ``--restore-file`` or ``--continue-once`` when the checkpoint it
    names does not exist (fairseq's own rule adds ``--checkpoint-suffix`` before ``.pt``)."""
    suffix = checkpoint_cfg.checkpoint_suffix or ""
    named = [("--continue-once", getattr(checkpoint_cfg, "continue_once", None))]
    if checkpoint_cfg.restore_file != DEFAULT_RESTORE_FILE:
        named.append(("--restore-file", checkpoint_cfg.restore_file))
    for option, path in named:
        if path and not any(os.path.isfile(p) for p in {path, path.replace(".pt", suffix + ".pt")}):
            raise SystemExit(f"{option} {path}: no such checkpoint (fairseq would train from scratch instead); "
                             f"give an existing file, or leave out {option}")


def another_run(filename, cfg):
    """What wrote the checkpoint ``filename`` when it is another task or architecture than the
    run of ``cfg`` (fairseq's config), and what to do; an empty string otherwise."""
    import torch

    try:
        state = torch.load(filename, map_location="cpu", mmap=True)
    except Exception:  # unreadable: fairseq's own words stand
        return ""
    def named(config):  # a config's (task, arch); its model part may be a Namespace (legacy models)
        def read(part, key):
            return part.get(key) if hasattr(part, "get") else getattr(part, key, None)

        return read(config["task"], "_name"), read(config["model"], "_name") or read(config["model"], "arch")

    saved = state.get("cfg")
    args = state.get("args")
    task, arch = named(saved) if saved is not None else (getattr(args, "task", None), getattr(args, "arch", None))
    mine = named(cfg)
    if (task, arch) == mine:
        return ""
    return (f"It was written by a run of --task {task} --arch {arch}, not this run's --task {mine[0]} --arch "
            f"{mine[1]}: give this run its own --save-dir (fairseq's default is checkpoints/).")


def guard_main(main):
    @functools.wraps(main)
    def locked_main(cfg, *args, **kwargs):
        from fairseq import distributed_utils

        check_named_checkpoints(cfg.checkpoint)
        if cfg.checkpoint.no_save or not distributed_utils.is_master(cfg.distributed_training):
            return main(cfg, *args, **kwargs)
        try:
            handle = lock_save_dir(cfg.checkpoint.save_dir)
        except SaveDirInUse as e:
            raise SystemExit(str(e)) from None
        try:
            return main(cfg, *args, **kwargs)
        finally:
            release(handle)

    return locked_main


def guard_epoch(train):
    @functools.wraps(train)
    def train_unless_finished(cfg, trainer, task, epoch_itr):
        why = finished(cfg, trainer)
        if why is not None:
            logger.info(f"nothing to train: {why} ({trainer.get_num_updates()} updates); no checkpoint is written")
            return [None], True
        return train(cfg, trainer, task, epoch_itr)

    return train_unless_finished


def _train_modules():
    """fairseq's train CLI as imported: ``fairseq-train`` imports ``fairseq_cli.train``
    before it loads the plugin; ``python -m fairseq_cli.train`` runs it as ``__main__``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "fairseq_cli.train":
        yield main
    if "fairseq_cli.train" in sys.modules:
        yield sys.modules["fairseq_cli.train"]


def apply():
    """Called once, by :func:`fairseq_sparse.compat.apply`.  Only a process that runs
    fairseq's train CLI is patched (importing it elsewhere would configure logging)."""
    for train_cli in _train_modules():
        for name, guard in (("main", guard_main), ("train", guard_epoch)):
            function = getattr(train_cli, name)
            if not getattr(function, "_fairseq_sparse_guard", False):  # fairseq's own decorators set __wrapped__
                guarded = guard(function)
                guarded._fairseq_sparse_guard = True
                setattr(train_cli, name, guarded)
