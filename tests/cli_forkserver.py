"""A fork server for the console scripts the tests run (tests/conftest.py:run_cli).

Every fairseq CLI process spends about 5.5 s of a 2-core machine importing torch and
fairseq (fairseq imports all its tasks, models and criterions, and through two of them
scikit-learn and SciPy) before it does any work, and the suite starts about 150 of them.
This server imports the third-party part of that once and forks a child per call. The
child is the process a fresh start would be from that point on: it takes the caller's
working directory, environment, argv and output files, runs the script's console entry
point, and exits through the interpreter's own shutdown (atexit handlers and non-daemon
threads included), with the exit status a fresh process would have.

What a child inherits that a fresh process would not have is only the state those
third-party imports leave (see serve()). fairseq, fairseq_cli, the plugin and
transformers are imported in the child, in the order a fresh process imports them.

Protocol (one call at a time, JSON lines): the caller writes
{"argv", "cwd", "env", "stdout", "stderr"} on stdin; the server answers {"pid": ...}
when the child is forked and {"returncode": ...} when it has exited.
"""

import json
import os
import sys


def run_child(request):
    """In the forked child: become the console script and never return."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(script)  # where a console script's own sys.path starts
    from importlib.metadata import entry_points

    (entry,) = entry_points(group="console_scripts", name=os.path.basename(script))
    # As the console-script wrapper does: sys.exit(main()). SystemExit unwinds out of the
    # server's loop, so the interpreter shuts down as a fresh process's would.
    sys.exit(entry.load()())


def serve():
    # What `import fairseq` spends most of its time on (3.8 of its 5 s here), and torch's
    # compiler stack, none of which configures logging or prints. fairseq itself is left
    # to the child: its import configures the root logger (a wav2vec module calls
    # basicConfig), which fairseq-train does before importing fairseq and
    # fairseq-generate after, so only a fresh import gives each CLI its own logging.
    import bitarray  # noqa: F401
    import hydra.core.config_store  # noqa: F401
    import numpy  # noqa: F401
    import omegaconf  # noqa: F401
    import sacrebleu  # noqa: F401
    import scipy.stats  # noqa: F401
    import sklearn.metrics  # noqa: F401
    import tensorboardX  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (the first optimiser step imports it: 2.5 s more)
    import tqdm  # noqa: F401
    import yaml  # noqa: F401

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
            run_child(request)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    serve()
