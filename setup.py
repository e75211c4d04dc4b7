"""Build of the fused CPU entmax kernel, when torch is present at build time.

Everything else is declared in pyproject.toml.  ``pip install .`` builds in an isolated
environment without torch: the wheel then holds the kernel's source, compiled on first
use against the torch that is installed (``fairseq_sparse/entmax/cpp_kernel.py``).
The README's set-up script builds it here instead:  pip install --no-build-isolation -e .
"""

from setuptools import setup

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # pip's isolated build environment
    ext_modules, cmdclass = [], {}
else:
    ext_modules = [
        CppExtension(
            "fairseq_sparse.entmax._C",
            ["fairseq_sparse/entmax/csrc/entmax_cpu.cpp"],
            # -g0 overrides the -g of Python's own build flags: debug information for
            # torch's headers doubled the compile time (31 s against 16 on 2 cores).
            extra_compile_args=["-O3", "-fopenmp", "-fno-trapping-math", "-g0"],
            extra_link_args=["-fopenmp"],
        )
    ]
    cmdclass = {"build_ext": BuildExtension}

setup(ext_modules=ext_modules, cmdclass=cmdclass)
