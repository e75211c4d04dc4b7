"""`python ARGS` for the shell pipelines the tests run (data_prep/*.sh take their Python from
$PYTHON): ask the fork server (forkserver.py, serve_client) listening on the socket
FAIRSEQ_SPARSE_TESTS_FORK_SOCKET names for a child that runs ARGS on this process's stdin,
stdout and stderr, and exit as that child exits. Where the server declines, or cannot be
reached, execute the interpreter (this one, started with -S by the wrapper commands.py
writes) as the pipeline would have.

Standard library only, and imported without site: it starts in a few milliseconds."""

import json
import os
import signal
import socket
import sys


def execute_python():
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])


def main():
    path = os.environ.get("FAIRSEQ_SPARSE_TESTS_FORK_SOCKET")
    if not path:
        execute_python()
    request = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server.connect(path)
        socket.send_fds(server, [json.dumps(request).encode()], [0, 1, 2])
        answer = json.loads(server.recv(1 << 16) or b'{"exec": true}')
    except OSError:  # no server there (it has exited), or a closed stdio fd
        answer = {"exec": True}
    if "pid" not in answer:
        execute_python()
    pid = answer["pid"]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda number, frame: os.kill(pid, number))
    try:
        status = server.recv(1 << 16)
    except OSError:
        status = b""
    code = json.loads(status)["returncode"] if status else 1  # the server's waiter died
    if code < 0:  # killed by a signal: end the same way, so the shell sees what killed it
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main()
