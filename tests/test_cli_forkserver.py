"""tests/_harness/forkserver.py: a forked call ends as a fresh interpreter's run of the same
program does (the status, what it printed, its atexit handlers and threads), though it
skips the interpreter's module teardown."""

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import _run, pipeline_env

pytestmark = pytest.mark.skipif(os.environ.get("FAIRSEQ_SPARSE_TESTS_FORK") == "0",
                                reason="FAIRSEQ_SPARSE_TESTS_FORK=0: nothing is forked")

ENDINGS = {
    "returns": "",
    "exits with a status": "sys.exit(3)",
    "exits with a message": "sys.exit('stopped: no data')",
    "raises": "raise ValueError('bad input')",
}

PROGRAM = """
import atexit, sys, threading, time

# Buffered whatever PYTHONUNBUFFERED says: what is left in it at the end is flushed on exit.
sys.stdout = open(sys.stdout.fileno(), "w", buffering=1 << 16, closefd=False)
print("forked" if "torch" in sys.modules else "fresh")  # the server imported torch

def late_line():
    time.sleep(0.3)
    print("from the thread", flush=True)

atexit.register(lambda: print("atexit handler"))
threading.Thread(target=late_line).start()  # not a daemon: the exit waits for it
print("buffered, never flushed by the program", end="")
sys.stderr.write("on stderr ")
{ending}
"""


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_forked_run_ends_as_a_fresh_one(tmp_path, ending):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(ending=ENDINGS[ending]), encoding="utf-8")
    fresh = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    forked = _run([sys.executable, str(script)], True, tmp_path, False, 60)
    assert forked.returncode == fresh.returncode == {"returns": 0, "exits with a status": 3}.get(ending, 1)
    lines = "buffered, never flushed by the programfrom the thread\natexit handler\n"
    assert (forked.stdout, fresh.stdout) == ("forked\n" + lines, "fresh\n" + lines)
    # A traceback names the server's frames too; its last line is the same.
    assert forked.stderr.startswith("on stderr ") and forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]


SCRIPT = """
import os, subprocess, sys
child = sys.argv[1]
for extra in ({}, {"MALLOC_TOP_PAD_": "268435456"}, {"OMP_NUM_THREADS": "1"}, {"SOME_SETTING": "1"}):
    env = {**os.environ, **extra}
    print(subprocess.run([sys.executable, child], env=env, capture_output=True, text=True).stdout.strip())
"""


def test_a_scripts_commands_are_forked_unless_their_environment_says_otherwise(tmp_path):
    """What experiment scripts start (here `python CHILD.py`) is forked too, with malloc
    tunables or a thread count of its own; another variable changes what the server's
    imports would have done, so that command is started fresh."""
    child = tmp_path / "child.py"
    child.write_text('import sys\nprint("forked" if "torch" in sys.modules else "fresh")\n', encoding="utf-8")
    script = tmp_path / "script.py"
    script.write_text(SCRIPT, encoding="utf-8")
    proc = _run([sys.executable, str(script), str(child)], True, tmp_path, True, 120)
    assert proc.stdout.split() == ["forked", "forked", "forked", "fresh"]


def test_an_environment_the_server_was_not_written_for_starts_commands_fresh(tmp_path, monkeypatch):
    """The server checks the Python and fairseq it was written for; elsewhere a command is
    started fresh (with one warning), and runs the same."""
    from tests._harness import commands, forkserver

    assert forkserver.supported() == (True, None)  # this environment: the pinned stack
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(ending=""), encoding="utf-8")
    monkeypatch.setattr(forkserver, "supported", lambda: (False, "written for fairseq 0.12.2 and 0.12.3, not 0.13"))
    monkeypatch.setattr(commands, "_support", None)
    with pytest.warns(UserWarning, match="forkserver.py not used: written for fairseq .* not 0.13"):
        proc = _run([sys.executable, str(script)], True, tmp_path, False, 60)
    assert proc.returncode == 0 and proc.stdout.startswith("fresh\n")


HYDRA_CHECK = """
import os
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from hydra._internal.config_repository import CachingConfigRepository
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

copies = []
copying = CachingConfigRepository.__init__
CachingConfigRepository.__init__ = lambda self, delegate: (copying(self, delegate), copies.append(self))[0]
args = options.parse_args_and_arch(options.get_training_parser(), [os.devnull, "--arch", "transformer", "--lr", "0.5"])
print(OmegaConf.to_yaml(convert_namespace_to_omegaconf(args)))
stores = [getattr(source, "store", None) for source in copies[0].delegate.sources]
print("shared" if ConfigStore.instance() in stores else "copied")
"""


def test_the_servers_hydra_speed_ups_are_in_effect_and_compose_the_same_configuration(tmp_path):
    """A forked child composes a fairseq-train configuration with the server's hydra speed-ups
    (its copy of hydra's repository shares the ConfigStore: a patch that hydra's plugin scan
    had undone once) and gets the configuration a fresh process composes."""
    script = tmp_path / "compose.py"
    script.write_text(HYDRA_CHECK, encoding="utf-8")
    forked = _run([sys.executable, str(script)], True, tmp_path, True, 120).stdout
    fresh = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                           check=True).stdout
    assert forked.endswith("shared\n") and fresh.endswith("copied\n")
    assert forked.rsplit("\n", 2)[0] == fresh.rsplit("\n", 2)[0] and "lr:\n  - 0.5" in fresh


PIPELINE = r"""
"$PYTHON" -c 'import sys; print("forked" if "torch" in sys.modules else "fresh", sys.argv, repr(sys.path[0]))' a b
"$PYTHON" -c 'import sys; sys.exit(3)'; echo "status $?"
"$PYTHON" -c 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)' 2> /dev/null; echo "status $?"
echo piped | "$PYTHON" -c 'import sys; print(sys.stdin.read().upper(), end="")' \
  | "$PYTHON" -c 'import sys; print(sys.stdin.read() * 2, end="")'
"$PYTHON" script.py x; echo "status $?"
"$PYTHON" -m json.tool <<< '{"b": 1}'
"$PYTHON" -u -c 'import sys; print("forked" if "torch" in sys.modules else "fresh")'
INPUT=other "$PYTHON" -c 'import os, sys; print("forked" if "torch" in sys.modules else "fresh", os.environ["INPUT"])'
UNNAMED=1 "$PYTHON" -c 'import sys; print("forked" if "torch" in sys.modules else "fresh")'
"$PYTHON" missing.py 2>&1 | sed 's/^.*python[0-9.]*: //'
"""


def test_a_pipelines_python_is_forked_and_runs_as_a_fresh_one(tmp_path):
    """A shell pipeline's `$PYTHON ...` (python_client.py) runs as the interpreter does: argv,
    the exit status or the signal, stdin and stdout through pipes, scripts and modules; it is
    forked where the server can run it as a fresh interpreter would, and executed fresh with an
    option of the interpreter's own (-u) or a variable the test did not name as an input (the
    inputs it names may change)."""
    (tmp_path / "script.py").write_text("import sys\nprint('script', sys.argv)\nsys.exit('failed')\n",
                                        encoding="utf-8")

    def run(env):
        proc = subprocess.run(["bash", "-c", PIPELINE], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines(), proc.stderr

    env = pipeline_env(INPUT="mine")
    for message in (None, b"not a request"):  # clients that leave early are dropped; the server serves on
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as client:
            client.connect(env["FAIRSEQ_SPARSE_TESTS_FORK_SOCKET"])
            if message:
                client.send(message)
    forked, stderr = run(env)
    fresh, _ = run({**os.environ, "PYTHON": sys.executable, "INPUT": "mine"})
    assert [word for word in (line.split(" ", 1)[0] for line in forked) if word in ("forked", "fresh")] == [
        "forked", "fresh", "forked", "fresh"]
    assert [line.replace("forked", "fresh") for line in forked] == fresh
    assert fresh == ["fresh ['-c', 'a', 'b'] ''", "status 3", "status 143", "PIPED", "PIPED",
                     "script ['script.py', 'x']", "status 1", "{", '    "b": 1', "}", "fresh", "fresh other", "fresh",
                     "can't open file " + repr(str(tmp_path / "missing.py")) + ": [Errno 2] No such file or directory"]
    assert stderr.count("failed") == 1
