#!/usr/bin/env bash
# Set up the environment if needed, then run the whole test suite, or the test paths named.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
# The project's own bytecode, written once here (up-to-date files are skipped): with
# PYTHONDONTWRITEBYTECODE set, as it often is, every process the tests start, each forked
# fairseq-train call among them, would otherwise compile the plugin's source again.
.venv/bin/python -m compileall -q -j 0 fairseq_sparse tests scripts benchmarks data_prep > /dev/null
# One pytest-xdist worker per core (at most 4; PYTEST_WORKERS overrides, `-n 0` runs
# serially). Each worker and the fairseq-train processes it starts use one intra-op
# thread: with torch's default of one thread per core, N workers oversubscribe the
# cores and spin-wait (docs/notes/stack.md#the-test-suites-time).
workers=${PYTEST_WORKERS:-$(.venv/bin/python -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# No path here: pytest.ini's testpaths runs tests/ unless the arguments name paths of their own.
exec .venv/bin/python -m pytest -n "$workers" "$@"
