"""A fork server for the console scripts and the scripts/*.py the tests run
(tests/conftest.py: run_cli, run_script).

Every fairseq CLI process spends about 5.5 s of a 2-core machine importing torch and
fairseq (fairseq imports all its tasks, models and criterions, and through two of them
scikit-learn and SciPy) before it does any work, and the suite starts about 150 of them,
and about 35 runs of the experiment scripts, which import the same. This server imports
them once and forks a child per call. The child is the process a fresh start would be
from that point on: it takes the caller's working directory, environment, argv and
output files, runs the console script's entry point (or, for `python SCRIPT.py ...`, the
script as __main__), and exits through the interpreter's own shutdown (atexit handlers
and non-daemon threads included), with the exit status a fresh process would have. What
the scripts start themselves (fairseq-train, ...) are fresh processes, as a user's are.

What a child inherits that a fresh process would not have is only the state those
imports leave (see serve()), with one correction: importing fairseq configures the root
logger (several of its task and model modules call logging.basicConfig), and a fresh
process does that at its first import of fairseq, which fairseq-train reaches after its
own basicConfig and fairseq-generate before. So the child starts with the root logger
unconfigured and replays fairseq's configuration at its own first `import fairseq...`
(replay_fairseq_logging), and each CLI logs as it would from a fresh start. fairseq_cli
and the plugin are imported in the child, as a fresh process imports them.

Protocol (one call at a time, JSON lines): the caller writes
{"argv", "cwd", "env", "stdout", "stderr"} on stdin; the server answers {"pid": ...}
when the child is forked and {"returncode": ...} when it has exited.
"""

import builtins
import json
import logging
import os
import runpy
import sys


def replay_fairseq_logging(handlers, root_level):
    """Unconfigure the root logger and give it back `handlers` and `root_level` (what
    importing fairseq left on it in the server) at the child's first import of fairseq or
    one of its modules, unless something configured it before then: what basicConfig does
    when a fresh process imports fairseq."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    real_import = builtins.__import__

    def first_fairseq_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name == "fairseq" or name.startswith("fairseq.")):
            builtins.__import__ = real_import
            if not root.handlers:
                for handler in handlers:
                    root.addHandler(handler)
                root.setLevel(root_level)
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = first_fairseq_import


def run_child(request, root_logging):
    """In the forked child: become the console script and never return."""
    replay_fairseq_logging(*root_logging)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    argv = request["argv"]
    # SystemExit unwinds out of the server's loop, so the interpreter shuts down as a fresh
    # process's would (an uncaught exception too: traceback on stderr, status 1).
    if argv[0] == sys.executable:  # `python SCRIPT.py ARGS`, as the interpreter runs it
        sys.argv = list(argv[1:])
        sys.path[0] = os.path.dirname(os.path.abspath(argv[1]))
        runpy.run_path(argv[1], run_name="__main__")
        sys.exit(0)
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(argv[0])  # where a console script's own sys.path starts
    from importlib.metadata import entry_points

    (entry,) = entry_points(group="console_scripts", name=os.path.basename(argv[0]))
    sys.exit(entry.load()())  # as the console-script wrapper does


def serve():
    # What a fairseq CLI spends most of its start on: torch, fairseq with everything it
    # imports (its tasks, models and criterions; SciPy and scikit-learn through two of
    # them), torch's compiler stack (the first optimiser step imports it) and the parts of
    # transformers the APE models use. None of them prints anything.
    import bitarray  # noqa: F401
    import numpy  # noqa: F401
    import sacrebleu  # noqa: F401
    import tensorboardX  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import tqdm  # noqa: F401
    import yaml  # noqa: F401

    import fairseq  # noqa: F401

    root = logging.getLogger()
    root_logging = (list(root.handlers), root.level)  # what importing fairseq configured
    from transformers import AutoTokenizer, BertConfig, BertModel, BertTokenizer  # noqa: F401

    # The protocol keeps its own copies of the pipes; fds 0 and 1 (what sys.stdin and
    # sys.stdout wrap) are pointed elsewhere, so a child never sees the protocol.
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            answers.close()
            run_child(request, root_logging)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    serve()
