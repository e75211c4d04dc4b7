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
# A venv without pip, then pip, setuptools and wheel in one step from the pip wheel that
# ensurepip bundles: the same result as `python -m venv` plus an upgrade, with one install fewer.
"$PYTHON" -m venv --without-pip "$VENV"
bundled_pip=$("$VENV/bin/python" -c 'import ensurepip, glob, os
print(*glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl"))[:1])' 2>/dev/null || true)
pip_flags=(--disable-pip-version-check -q)
if [[ -n "$bundled_pip" ]]; then
  "$VENV/bin/python" "$bundled_pip/pip" install "${pip_flags[@]}" --upgrade pip setuptools wheel
else  # a Python whose ensurepip has no bundled wheel (some distributions split it out)
  "$VENV/bin/python" -m ensurepip -q && "$VENV/bin/python" -m pip install "${pip_flags[@]}" --upgrade pip setuptools wheel
fi
# pip byte-compiles what it installs one file at a time; compileall below does it on
# every core (docs/notes/stack.md#the-test-suites-time).
pip=("$VENV/bin/python" -m pip "${pip_flags[@]}")
# fairseq declares torchaudio, whose 2.11 wheel does not match torch 2.13 and makes
# `import transformers` crash; we use no audio code, so install fairseq without its
# dependency list and its real runtime dependencies from requirements.txt.
"${pip[@]}" install --no-compile torch==2.13.0 -r requirements.txt
"${pip[@]}" install --no-compile --no-deps ve-fairseq==0.12.3
# Without bytecode every Python process would compile its imports again (PYTHONDONTWRITEBYTECODE
# is common, and the tests start hundreds).  It compiles while the C++ kernel builds (one core),
# and leaves out what no process here imports: the packages' own test directories and
# transformers' model families other than those the plugin and its tests load (one that is
# left out still imports, compiling its source in memory).  One file of torch's own tests is
# Python 3.12 syntax and fails as it did silently under pip, hence -qq and the `|| true`.
skip='/site-packages/(transformers/models/(?!(auto|align|bart|bert|bloom|encoder_decoder|gpt2|llama|mistral)/)|[^/]+/(.+/)?tests?/)'
"$VENV/bin/python" -m compileall -qq -j 0 -x "$skip" "$VENV/lib" &
compiling=$!
trap 'kill "$compiling" 2>/dev/null || true' EXIT
# The C++ kernel compiles against the torch just installed, hence no build isolation.
"${pip[@]}" install --no-build-isolation --no-deps -e .
wait "$compiling" || true
trap - EXIT
"$VENV/bin/python" -c "import fairseq_sparse.entmax._C" || { echo "[setup] the C++ entmax kernel failed to build" >&2; exit 1; }
echo "$want" > "$VENV/.fairseq_sparse_stamp"
echo "[setup] done"
