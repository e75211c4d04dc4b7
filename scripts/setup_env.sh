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
# A venv without pip; the installers come next (uv below, or pip from the wheel that ensurepip bundles).
"$PYTHON" -m venv --without-pip "$VENV"
bundled_pip=$("$VENV/bin/python" -c 'import ensurepip, glob, os
print(*glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl"))[:1])' 2>/dev/null || true)
pip_flags=(--disable-pip-version-check -q)
pip=("$VENV/bin/python" -m pip "${pip_flags[@]}")
# fairseq declares torchaudio, whose 2.11 wheel does not match torch 2.13 and makes
# `import transformers` crash; we use no audio code, so install fairseq without its
# dependency list and its real runtime dependencies from requirements.txt.

# uv installs the same pinned stack faster than pip (it downloads and unpacks in parallel;
# docs/notes/stack.md#the-test-suites-time), but it reads none of pip's configuration, and
# PyPI's torch for Linux is the CUDA build (GBs). So uv is used only where pip's
# configuration names a folder of local wheels (find-links) that holds the CPU build of
# torch 2.13.0, given to uv as that file; anywhere else, or if uv fails, pip installs as
# before. Neither byte-compiles: compileall below does it on every core.
install_with_uv() {
  # The Python's own pip answers faster than the bundled wheel, which runs from a zip and
  # compiles its modules at every start.
  local bootstrap=("$PYTHON" -m pip) links dir candidate torch_wheel=""
  if ! "${bootstrap[@]}" --version > /dev/null 2>&1; then
    [[ -n "$bundled_pip" ]] || return 1
    bootstrap=("$VENV/bin/python" "$bundled_pip/pip")
  fi
  links=$("${bootstrap[@]}" config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p")
  for dir in $links; do
    for candidate in "${dir#file://}"/torch-2.13.0+cpu-cp311-*.whl; do
      [[ -f "$candidate" ]] && torch_wheel=$candidate && break 2
    done
  done
  [[ -n "$torch_wheel" ]] || return 1
  "${bootstrap[@]}" --python "$VENV/bin/python" install "${pip_flags[@]}" uv==0.13.10 || return 1
  local uv=("$VENV/bin/uv" pip install --python "$VENV/bin/python" -q)
  "${uv[@]}" pip setuptools wheel "$torch_wheel" -r requirements.txt && "${uv[@]}" --no-deps ve-fairseq==0.12.3
}
if ! install_with_uv; then
  if [[ -n "$bundled_pip" ]]; then
    "$VENV/bin/python" "$bundled_pip/pip" install "${pip_flags[@]}" --upgrade pip setuptools wheel
  else  # a Python whose ensurepip has no bundled wheel (some distributions split it out)
    "$VENV/bin/python" -m ensurepip -q && "${pip[@]}" install --upgrade pip setuptools wheel
  fi
  "${pip[@]}" install --no-compile torch==2.13.0 -r requirements.txt
  "${pip[@]}" install --no-compile --no-deps ve-fairseq==0.12.3
fi
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
