"""run_cli and run_script: the tests' commands, forked from the fork server
(``forkserver.py``) where it supports this Python and fairseq, else started fresh."""

import atexit
import json
import locale
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from . import forkserver

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


class _ForkServer:
    """tests/_harness/forkserver.py, started once per test process: run_cli's console scripts and
    run_script's scripts are forked from it after torch, fairseq and transformers are
    imported, instead of each importing them again (most of a 5.5 s start on 2 cores; the
    suite makes about 185 calls)."""

    def __init__(self):
        self.env = dict(os.environ)  # what the server imports under
        # The socket the pipelines' Python (python_client.py, through the `python` written
        # here) asks the server on, and that wrapper: a few milliseconds to start.
        self.home = Path(tempfile.mkdtemp(prefix="forkserver-"))
        self.socket = self.home / "socket"
        self.python = self.home / "python"
        self.python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "
                               f"{shlex.quote(str(Path(__file__).with_name('python_client.py')))} \"$@\"\n")
        self.python.chmod(0o755)
        # os.environ given explicitly: a C library may have set a variable in the process's own
        # environment (COLUMNS, for one) that os.environ, and so the calls' environments, lack.
        self.proc = subprocess.Popen([sys.executable, str(Path(forkserver.__file__)), str(self.socket)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=dict(os.environ))
        self.pending = b""
        atexit.register(shutil.rmtree, self.home, True)
        atexit.register(self.proc.kill)

    def answer(self, timeout=None):
        """The server's next JSON line, or None after `timeout` seconds without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.proc.stdout], [], [], wait)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"tests/_harness/forkserver.py exited ({self.proc.wait()})")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, cmd, cwd, timeout):
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            request = {"argv": cmd, "cwd": str(cwd or os.getcwd()), "env": dict(os.environ),
                       "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            pid = self.answer()["pid"]
            done = self.answer(timeout)
            if done is None:
                os.kill(pid, signal.SIGKILL)
                self.answer()
                raise subprocess.TimeoutExpired(cmd, timeout)
            # As subprocess.run(text=True) reads them: the locale's encoding, universal newlines.
            stdout, stderr = (Path(f).read_text(encoding=locale.getpreferredencoding(False)) for f in (out, err))
        return subprocess.CompletedProcess(cmd, done["returncode"], stdout, stderr)


_fork_server = None


def run_cli(name, *args, cwd=None, check=True, timeout=600):
    """Run a console script of this virtual environment (fairseq-train, ...) and return it."""
    return _run([str(BIN / name), *map(str, args)], forkserver.console_script(name) is not None, cwd, check, timeout)


def run_script(name, *args, cwd=None, check=False, timeout=900):
    """`python scripts/NAME ARGS` (or `python NAME ARGS` where NAME is a path under the
    repository, such as data_prep/hsvae_sets.py) and return it, as
    subprocess.run(capture_output=True, text=True) would. The script's own fairseq
    commands and `python scripts/...` runs are forked too (tests/_harness/forkserver.py,
    fork_commands_here)."""
    script = REPO / name if "/" in name else REPO / "scripts" / name
    return _run([sys.executable, str(script), *map(str, args)], True, cwd, check, timeout)


def pipeline_env(env=None, **inputs):
    """The environment to run a shell pipeline in (data_prep/*.sh): `env` (os.environ by
    default) with the variables `inputs` names set, and PYTHON pointing at the fork server's
    client where the server applies, so that the pipeline's Python programs are forked as
    run_script's are (forkserver.py, serve_client). The server forks only under its own
    environment but for PATH and the pipeline's `inputs`; otherwise the client executes the
    interpreter, as does a PYTHON in `inputs`."""
    env = {**(os.environ if env is None else env), **{name: str(value) for name, value in inputs.items()}}
    server = None if "PYTHON" in inputs else _server()
    if server is None:
        return env
    while not server.socket.exists() and server.proc.poll() is None:
        time.sleep(0.01)  # the server's first step: a client that comes earlier executes Python itself
    return {**env, "PYTHON": str(server.python), "FAIRSEQ_SPARSE_TESTS_FORK_SOCKET": str(server.socket),
            forkserver.PIPELINE_INPUTS: ",".join(inputs)}


_support = None


def _forking_supported():
    """Whether the fork server was written for this Python and fairseq (once per process,
    with a warning where not: the commands then start fresh, slower but the same)."""
    global _support
    if _support is None:
        _support, why_not = forkserver.supported()
        if not _support:
            warnings.warn(f"tests/_harness/forkserver.py not used: {why_not}; every command starts fresh")
    return _support


def _server():
    """This test process's fork server (started at the first call), or None where commands
    start fresh: under FAIRSEQ_SPARSE_TESTS_FORK=0, or where the server does not apply."""
    global _fork_server
    if os.environ.get("FAIRSEQ_SPARSE_TESTS_FORK", "1") == "0" or not _forking_supported():
        return None
    if _fork_server is None:
        _fork_server = _ForkServer()
    return _fork_server


def _run(cmd, forkable, cwd, check, timeout):
    """Through the fork server (_server()) unless the environment has changed since the server
    started, as forkserver.differs() tells, but for what the test process sets in itself
    (forkserver.SET_IN_THE_TEST_PROCESS): the server imported torch and the rest under the old one."""
    server = _server() if forkable else None
    if server is not None and not forkserver.differs(os.environ, server.env, forkserver.SET_IN_THE_TEST_PROCESS):
        proc = server.run(cmd, cwd, timeout)
    else:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc
