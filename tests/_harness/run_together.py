"""Run the commands given (each a JSON list) at the same time; exit 0 when all succeed,
else 1 with the output of the first that failed, once the others are stopped.

tests/conftest.py runs the two gloo ranks of a distributed fairseq-train this way,
through its fork server: the ranks, started by this script, are then forked as the
experiment scripts' commands are (tests/_harness/forkserver.py, fork_commands_here) rather
than started fresh, which saves each rank the import of fairseq and the interpreter's
teardown (about 10 s on 2 cores)."""

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time


def main(commands, timeout):
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as files:
        # Files, not pipes: a rank blocked on a full pipe would hold up the other in a collective.
        logs = [files.enter_context(open(f"{tmp}/{i}.log", "w+", encoding="utf-8")) for i in range(len(commands))]
        procs = [subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT) for cmd, log in zip(commands, logs)]
        deadline = time.monotonic() + timeout
        codes = [p.poll() for p in procs]
        # A rank that fails leaves the other waiting in a collective: stop it, not wait.
        while None in codes and not any(codes) and time.monotonic() < deadline:
            time.sleep(0.1)
            codes = [p.poll() for p in procs]
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        late = not any(codes) and None in codes
        failed = codes.index(None) if late else next((i for i, code in enumerate(codes) if code), None)
        if failed is None:
            return 0
        logs[failed].seek(0)
        what = f"still ran after {timeout:g} s" if late else f"failed ({codes[failed]})"
        print(f"command {failed} {what}: {' '.join(commands[failed])}\n{logs[failed].read()[-3000:]}")
        return 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commands", nargs="+", type=json.loads, help="a command line as a JSON list")
    parser.add_argument("--timeout", type=float, default=280,
                        help="seconds before the commands still running are killed")
    args = parser.parse_args()
    sys.exit(main(args.commands, args.timeout))
