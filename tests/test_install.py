"""Installing as Python users install: `pip install .` with pip's isolated build (no torch
in the build environment), then the C++ kernel compiled on first use against the torch
that is installed, or the reference path with one warning when no compiler is found."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

CHECK = """
import warnings
import torch
import fairseq_sparse
from fairseq_sparse.entmax import cpp_kernel, entmax15, entmax_alpha, has_cpp_kernel, sparsemax, use_backend
print(fairseq_sparse.__file__)
x = torch.randn(6, 33, dtype=torch.float64)
alpha = torch.linspace(1.1, 1.9, 6, dtype=torch.float64)[:, None]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiled = has_cpp_kernel()
    got = [sparsemax(x), entmax15(x), entmax_alpha(x, alpha)]
print(compiled, getattr(cpp_kernel.load(), "__name__", None))
print(sum("could not be compiled" in str(w.message) for w in caught))
with use_backend("torch"):
    want = [sparsemax(x), entmax15(x), entmax_alpha(x, alpha)]
for g, w in zip(got, want):
    torch.testing.assert_close(g, w, atol=1e-10, rtol=0)
print("same")
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The wheel `pip install .` builds, installed into a directory of its own. It is built
    from a copy of the checkout: setuptools writes build/ and the egg-info into the source."""
    root = tmp_path_factory.mktemp("install")
    source, dist, target = root / "source", root / "dist", root / "site"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                                ".pytest_cache", "*.so"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    wheels = list(dist.glob("fairseq_sparse-*.whl"))
    assert len(wheels) == 1, wheels
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                              str(wheels[0])], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    return root, target


def run_check(root, target, extensions, **env):
    environment = {**os.environ, "PYTHONPATH": str(target), "TORCH_EXTENSIONS_DIR": str(root / extensions), **env}
    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=root, env=environment, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout.split("\n"), proc.stderr


def test_pip_install_builds_without_torch_and_compiles_the_kernel_on_first_use(site):
    root, target = site
    assert not list(target.glob("fairseq_sparse/entmax/_C*")), "the isolated build has no torch to compile with"
    assert (target / "fairseq_sparse" / "entmax" / "csrc" / "entmax_cpu.cpp").is_file()
    lines, stderr = run_check(root, target, "ext")
    where, kernel, warned, same = lines[:4]
    assert where.startswith(str(target)), where  # the installed copy, not the checkout
    assert kernel == "True fairseq_sparse_entmax_cpu" and warned == "0" and same == "same"
    assert stderr.count("compiling the C++ entmax kernel against this torch, once") == 1, stderr[-2000:]
    lines, stderr = run_check(root, target, "ext")  # cached: loaded without a word
    assert lines[1] == "True fairseq_sparse_entmax_cpu" and "compiling" not in stderr, stderr[-2000:]


def test_without_a_compiler_the_reference_runs_after_one_warning(site):
    root, target = site
    _, kernel, warned, same = run_check(root, target, "ext-none", CXX="/nonexistent/c++")[0][:4]
    assert kernel == "False None" and warned == "1" and same == "same"
