"""The Triton kernels: fused alpha-entmax attention, whose (Tq, Tk) scores are never stored,
and alpha-entmax of the rows of a matrix.  Importing this package needs Triton.

By phase, each module using only those above it:

- ``config``: layout (``KernelConfig``, tiles per device, precision, Newton's tolerance)
  and the constants every phase reads;
- ``call``: what one attention call fixes for its forward and backward (``Call``), and
  the host-side arguments made from it;
- ``tiles``: a tile's scores and masks, the tiles within reach, attention dropout;
- ``threshold``: the threshold solver's maths on a tile of rows;
- ``forward_pass``: the forward kernel as its phases (maxima, Newton, the exact threshold,
  the output, the alpha gradient's statistics) and its launch;
- ``backward_pass``: the dk/dv and dq kernels and their launch;
- ``function``: both as an autograd Function, which ``entmax.attention.attend`` calls;
- ``rows``: the row-wise kernels of ``entmax.activations``.

Under ``TRITON_INTERPRET=1`` (set before import) every kernel runs on CPU tensors.
"""

from .call import Call, Forward, Packing, dense, packing  # noqa: F401
from .config import (ENTMAX15, GENERIC, INTERPRET, MAX_HEAD_DIM, PACKAGE, SPARSEMAX, KernelConfig,  # noqa: F401
                     fixed_kind, supports)
from .function import FusedEntmaxAttention  # noqa: F401
from .forward_pass import forward  # noqa: F401
from .backward_pass import backward  # noqa: F401
