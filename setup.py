"""Build of the fused CPU entmax kernel, when torch is present at build time.

Everything else is declared in pyproject.toml.  ``pip install .`` builds in an isolated
environment without torch: the wheel then holds the kernel's source, compiled on first
use against the torch that is installed (``fairseq_sparse/entmax/cpp_kernel.py``).
The README's set-up script builds it here instead:  pip install --no-build-isolation -e .
"""

import importlib.util

from setuptools import setup

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # pip's isolated build environment
    ext_modules, cmdclass = [], {}
else:
    # The compile flags are cpp_kernel.py's, which compiles the same file on first use; it is
    # loaded by path because importing the package would import fairseq.
    spec = importlib.util.spec_from_file_location("cpp_kernel", "fairseq_sparse/entmax/cpp_kernel.py")
    cpp_kernel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cpp_kernel)
    ext_modules = [
        CppExtension(
            "fairseq_sparse.entmax._C",
            ["fairseq_sparse/entmax/csrc/entmax_cpu.cpp"],
            extra_compile_args=cpp_kernel.CFLAGS,
            extra_link_args=cpp_kernel.LDFLAGS,
        )
    ]
    cmdclass = {"build_ext": BuildExtension}

setup(ext_modules=ext_modules, cmdclass=cmdclass)
