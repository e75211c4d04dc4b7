#!/usr/bin/env bash
# Create .venv with the pinned stack and the plugin (with its C++ kernel) installed.
# Idempotent: re-running is a no-op unless requirements, setup.py or the kernel changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
stamp_inputs=(scripts/setup_env.sh requirements.txt setup.py pyproject.toml fairseq_sparse/entmax/cpp_kernel.py
              fairseq_sparse/entmax/csrc/*.cpp)
want=$(cat "${stamp_inputs[@]}" | sha256sum | cut -d' ' -f1)
if [[ -f "$VENV/.fairseq_sparse_stamp" && "$(cat "$VENV/.fairseq_sparse_stamp")" == "$want" ]]; then
  exit 0
fi

echo "[setup] creating $VENV (torch 2.13.0 CPU, ve-fairseq 0.12.3 without torchaudio, pinned deps)"
"$PYTHON" -m venv "$VENV"
# pip byte-compiles what it installs one file at a time; compileall below does it on
# every core (docs/notes/stack.md#the-test-suites-time).
pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install --upgrade pip setuptools wheel
"${pip[@]}" install --no-compile torch==2.13.0
# fairseq declares torchaudio, whose 2.11 wheel does not match torch 2.13 and makes
# `import transformers` crash; we use no audio code, so install fairseq without its
# dependency list and its real runtime dependencies from requirements.txt.
"${pip[@]}" install --no-compile --no-deps ve-fairseq==0.12.3
"${pip[@]}" install --no-compile -r requirements.txt
# Without bytecode every Python process would compile its imports again (PYTHONDONTWRITEBYTECODE
# is common, and the tests start hundreds). One file of torch's own tests is Python 3.12 syntax
# and fails here as it did silently under pip, hence -qq and the `|| true`.
"$VENV/bin/python" -m compileall -qq -j 0 "$VENV/lib" || true
# The C++ kernel compiles against the torch just installed, hence no build isolation.
"${pip[@]}" install --no-build-isolation --no-deps -e .
"$VENV/bin/python" -c "import fairseq_sparse.entmax._C" || { echo "[setup] the C++ entmax kernel failed to build" >&2; exit 1; }
echo "$want" > "$VENV/.fairseq_sparse_stamp"
echo "[setup] done"
