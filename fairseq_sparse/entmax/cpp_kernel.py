"""The fused CPU kernel (``csrc/entmax_cpu.cpp``): built with the package, or on first use.

The README's set-up script (``pip install --no-build-isolation -e .``) compiles it at
install time as ``fairseq_sparse.entmax._C``.  A wheel built without torch (plain
``pip install .``, whose isolated build environment has none) holds only its source:
the first time it is needed it is compiled against the torch that is installed, with
``torch.utils.cpp_extension.load``, and cached in torch's extension directory
(``$TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``), so later
processes load it in a moment.  Without a compiler or ninja, the pure-PyTorch
reference runs instead, after one warning.
"""

import logging
import warnings
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "csrc" / "entmax_cpu.cpp"
# Also setup.py's build flags.  Non-trapping maths lets the compiler vectorise the
# threshold loops; -ffast-math is not used, since it would drop the NaN/inf handling.
# -g0 overrides the -g of Python's own flags, which setup.py's build inherits: debug
# information for torch's headers would double the compile time.
CFLAGS = ["-O3", "-fopenmp", "-fno-trapping-math", "-g0"]
LDFLAGS = ["-fopenmp"]

NAME = "fairseq_sparse_entmax_cpu"

_kernel = None
_looked = False


def load():
    """The compiled kernel module, or None when it can be neither imported nor compiled."""
    global _kernel, _looked
    if _looked:
        return _kernel
    _looked = True
    try:
        from . import _C

        _kernel = _C
        return _kernel
    except ImportError:  # not built at install time
        pass
    try:
        from torch.utils.cpp_extension import _get_build_directory, load as compile_and_load

        build = Path(_get_build_directory(NAME, verbose=False))
        if not (build / f"{NAME}.so").is_file():  # the one slow call: say so, as it starts
            logging.getLogger(__name__).warning(
                f"fairseq_sparse: compiling the C++ entmax kernel against this torch, once (about a minute; "
                f"cached in {build})")
        _kernel = compile_and_load(name=NAME, sources=[str(SOURCE)],
                                   extra_cflags=CFLAGS, extra_ldflags=LDFLAGS)
    except Exception as e:  # no compiler, no ninja, no write access to the cache, ...
        warnings.warn(f"fairseq_sparse: the C++ entmax kernel could not be compiled ({type(e).__name__}: "
                      f"{str(e).strip().splitlines()[-1] if str(e).strip() else e}); CPU tensors use the "
                      "pure-PyTorch reference (same results, slower)", RuntimeWarning, stacklevel=3)
    return _kernel
