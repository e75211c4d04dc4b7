"""Sparsemax, 1.5-entmax and alpha-entmax as autograd Functions.

All three are the alpha-entmax transformation (Peters, Niculae & Martins, 2019)

    entmax_alpha(x) = argmax_{p in simplex} p.x + H^T_alpha(p),
    entmax_alpha(x)_i = [(alpha - 1) x_i - tau]_+ ^ (1 / (alpha - 1)),

at alpha = 2 (sparsemax; Martins & Astudillo, 2016), alpha = 1.5, or a learned
alpha in (1, 2] (Correia, Niculae & Martins, 2019, "Adaptively Sparse
Transformers"), whose gradient with respect to alpha is given in closed form.

Rows are taken along ``dim``.  Half and bfloat16 inputs are computed in float32
and returned in their own dtype.  Scores of -inf (masks) get exactly zero
probability, and a row with no finite score returns zeros with zero gradient.  A
row holding NaN or +inf returns NaN (and NaN gradients), as softmax does, on every
backend.
Integer and boolean inputs are refused, as softmax refuses them.  Gradients taken with
``create_graph=True`` are themselves differentiable (in x and alpha): the backward then
runs the reference's closed forms as tensor ops (``_graph_backward``).

Near alpha = 1 float32 cannot resolve the power 1/(alpha - 1) (a row's sum is off by
about 4e-8 / (alpha - 1)), so a call whose smallest alpha is below
``FLOAT32_ALPHA_MIN`` computes in float64, and float64 computes alpha - 1 below
``FLOAT64_DELTA_MIN`` as that value (entmax is then softmax to within about
2 (alpha - 1)): the rows sum to 1 at every alpha in (1, 2].

On CPU a fused C++ kernel is used (built at install time, or compiled on first use:
``cpp_kernel.py``), on CUDA a fused Triton kernel when Triton is installed
(``kernels/rows.py``; it also keeps half and bfloat16 rows in their dtype in memory);
otherwise the pure-PyTorch reference in ``reference.py``.
"""

import contextlib
import contextvars
from typing import Optional, Tuple

import torch
from torch.autograd import Function

from . import cpp_kernel, reference, torch_compat

try:
    from .kernels import rows as row_kernels
except ImportError:  # no Triton (e.g. CPU-only torch)
    row_kernels = None

# Below this alpha a float32 row sums to 1 only within about 4e-8 / (alpha - 1): such calls
# are computed in float64.
FLOAT32_ALPHA_MIN = 1.01
# The smallest alpha - 1 computed as itself in float64 (whose sums are within about 1e-16 /
# (alpha - 1)); at this one entmax is within about 2e-8 of both softmax and the true value.
FLOAT64_DELTA_MIN = 1e-8

_BACKENDS = ("auto", "torch", "cpp", "triton")
# The backend of the current thread or task (``use_backend``): a context variable, so that
# one thread's choice never reaches another's calls.
_backend = contextvars.ContextVar("fairseq_sparse_entmax_backend", default="auto")


def has_cpp_kernel():
    """Whether the fused C++ kernel is available (compiling it now if it was not built)."""
    return cpp_kernel.load() is not None


def has_triton_kernel():
    return row_kernels is not None


@contextlib.contextmanager
def use_backend(name):
    """Within a block, use ``"torch"`` (the reference) everywhere, or ``"auto"``: the C++
    kernel on CPU and the Triton kernel on CUDA where available.  ``"cpp"`` and
    ``"triton"`` are ``"auto"`` that fails early if that kernel is missing.  The choice holds
    in the calling thread (or asyncio task) only; a ``torch.compile`` graph keeps the
    backend it was compiled under."""
    if name not in _BACKENDS:
        raise ValueError(f"unknown entmax backend {name!r}: expected one of {', '.join(_BACKENDS)}")
    if name == "cpp" and cpp_kernel.load() is None:
        raise RuntimeError("the C++ entmax kernel is neither built nor compilable here (no C++ compiler or ninja?): "
                           "see fairseq_sparse/entmax/cpp_kernel.py")
    if name == "triton" and row_kernels is None:
        raise RuntimeError("the Triton entmax kernel needs the `triton` package (CUDA builds of torch ship it)")
    token = _backend.set(name)
    try:
        yield
    finally:
        _backend.reset(token)


# torch.compile cannot trace a context variable: a compiled graph takes the backend of the
# thread that compiled it, as a constant.
@torch_compat.assume_constant_result
def current_backend():
    """The backend ``use_backend`` chose for the calling thread: "auto" unless inside it."""
    return _backend.get()


def _compute_dtype(dtype):
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _use_cpp(x):
    # The device is checked first, so that CUDA users never compile the CPU kernel.
    return current_backend() != "torch" and x.device.type == "cpu" and cpp_kernel.load() is not None


def _use_triton(x):
    backend = current_backend()
    if backend == "torch" or row_kernels is None or not row_kernels.supports(x):
        return False
    # CPU tensors reach the kernel only under Triton's interpreter, and only when asked
    # for by name (the tests); otherwise the C++ kernel serves the CPU.
    return x.is_cuda or backend == "triton"


def _to_rows(x, dim):
    """Move ``dim`` last and flatten to (rows, d), in a compute dtype unless the
    Triton kernel takes the rows (it upcasts in registers)."""
    x = x.movedim(dim, -1)
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    if not _use_triton(x2):
        x2 = x2.to(_compute_dtype(x.dtype))
    return x2.contiguous(), shape


def _from_rows(y, shape, dim, dtype):
    return y.reshape(shape).movedim(-1, dim).to(dtype)


def _alpha_rows(alpha, x, dim):
    """Per-row alpha as an (rows, 1) tensor, checking shape and range."""
    if alpha.dim() > x.dim():
        raise ValueError(f"alpha has {alpha.dim()} dims but x has {x.dim()}")
    a = alpha.reshape((1,) * (x.dim() - alpha.dim()) + alpha.shape)
    if a.shape[dim] != 1:
        raise ValueError(f"alpha must have size 1 along dim={dim}, got shape {tuple(alpha.shape)}")
    try:
        a = a.expand(x.shape)
    except RuntimeError as e:
        raise ValueError(f"alpha of shape {tuple(alpha.shape)} does not broadcast to x of shape {tuple(x.shape)}") from e
    a = a.movedim(dim, -1)[..., :1]
    return a.reshape(-1, 1).to(_compute_dtype(x.dtype)).contiguous()


def check_alpha_range(alpha):
    """The smallest alpha, after checking that every alpha lies in (1, 2]: one value read
    back to the host for both.  Checked on alpha itself (one value per head), not on its
    per-row expansion."""
    a = alpha.detach()
    lowest = torch.where(((a > 1) & (a <= 2)).all(), a.min(), -1.0).item()
    if lowest < 0:
        low, high = a.min().double().item(), a.max().double().item()
        raise ValueError(f"entmax alpha must lie in (1, 2], got values in [{low!r}, {high!r}]"
                         + (f" (if it was meant to be just above 1: {a.dtype} rounds it to 1; give a float64 tensor)"
                            if low == 1.0 and a.dtype != torch.float64 else ""))
    return lowest


def _precise(x2, alpha_rows, lowest):
    """(rows, alpha rows) in a dtype that resolves alpha: float64 when a float32 call has
    an alpha below FLOAT32_ALPHA_MIN, whose alpha - 1 is then kept at FLOAT64_DELTA_MIN
    or more.  ``lowest``: the smallest alpha as the range check read it, or None where
    alpha was not read (it is then taken to be FLOAT32_ALPHA_MIN or more)."""
    if x2.dtype != torch.float64 and lowest is not None and lowest < FLOAT32_ALPHA_MIN:
        x2, alpha_rows = x2.double(), alpha_rows.double()
    if x2.dtype == torch.float64:
        alpha_rows = alpha_rows.clamp_min(1 + FLOAT64_DELTA_MIN)
    return x2, alpha_rows


def _kernel_alpha(alpha, x2):
    """The C++ kernel takes one alpha per row, also for a constant alpha."""
    if isinstance(alpha, float):
        return torch.full((x2.shape[0],), alpha, dtype=x2.dtype)
    return alpha.reshape(-1)


def _row_kernels_forward(x2, alpha):
    """alpha-entmax of each row; ``alpha`` is a float or an (rows, 1) tensor.

    A row holding NaN or +inf is NaN, as softmax makes it, whichever backend runs: the
    kernels would otherwise each do something else (drop the NaN and renormalise, zero
    the row, or return scores), and a diverging run would be hidden."""
    if _use_triton(x2):
        y2 = row_kernels.forward(x2, alpha)
    elif _use_cpp(x2):
        y2 = cpp_kernel.load().forward(x2, _kernel_alpha(alpha, x2), reference.newton_tol(x2.dtype))
    else:
        y2 = reference.forward(x2, alpha)
    # One reduction finds them: a row's max is NaN when it holds a NaN, +inf when a +inf.
    # Filled unconditionally: asking first whether any row is invalid would make the host
    # wait for a GPU on every call (twice per attention layer in training).
    top = x2.amax(-1, keepdim=True)
    return y2.masked_fill_(torch.isnan(top) | torch.isposinf(top), float("nan"))


def _row_kernels_backward(y2, dy2, alpha, alpha_grad):
    """Gradients of each row (and of its alpha); NaN for a NaN row, as softmax gives."""
    if _use_triton(y2):
        dx, da = row_kernels.backward(y2, dy2, alpha, alpha_grad)
    elif _use_cpp(y2):
        dx, da = cpp_kernel.load().backward(y2, dy2, _kernel_alpha(alpha, y2), alpha_grad)
        da = da.reshape(-1, 1) if alpha_grad else None
    else:
        dx, da = reference.backward(y2, dy2, alpha, alpha_grad)
    invalid = torch.isnan(y2[:, :1])  # the forward pass made such rows NaN throughout
    dx.masked_fill_(invalid, float("nan"))  # unconditionally, as in _row_kernels_forward
    return dx, (da.masked_fill_(invalid, float("nan")) if da is not None else None)


# The row kernels as PyTorch operators, so that torch.compile traces through them (a
# pybind or Triton call would break its graph): ``fixed`` is the constant alpha, or 0
# for the per-row ``alpha`` tensor.  Their fake implementations give the shapes; their
# autograd is the closed-form backward, also an operator.
@torch.library.custom_op("fairseq_sparse::entmax_rows", mutates_args=())
def entmax_rows(x2: torch.Tensor, alpha: Optional[torch.Tensor], fixed: float) -> torch.Tensor:
    """alpha-entmax of each row of the 2-D ``x2``, at ``fixed`` or at the (rows, 1) ``alpha``."""
    return _row_kernels_forward(x2, fixed if fixed else alpha)


@entmax_rows.register_fake
def _(x2, alpha, fixed):
    return torch.empty_like(x2)


@torch.library.custom_op("fairseq_sparse::entmax_rows_backward", mutates_args=())
def entmax_rows_backward(y2: torch.Tensor, dy2: torch.Tensor, alpha: Optional[torch.Tensor], fixed: float,
                         alpha_grad: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(d x2, d alpha) of :func:`entmax_rows` at its output ``y2``; d alpha is (rows, 1), or
    empty without ``alpha_grad``."""
    dx, da = _row_kernels_backward(y2, dy2, fixed if fixed else alpha, alpha_grad)
    return dx, (da if da is not None else y2.new_empty(0, 1))


@entmax_rows_backward.register_fake
def _(y2, dy2, alpha, fixed, alpha_grad):
    return torch.empty_like(y2), y2.new_empty(y2.shape[0] if alpha_grad else 0, 1)


def _setup_context(ctx, inputs, output):
    _, alpha, fixed = inputs
    ctx.save_for_backward(output, alpha)
    ctx.fixed = fixed


def _entmax_rows_gradient(ctx, dy2):
    y2, alpha = ctx.saved_tensors
    alpha_grad = alpha is not None and ctx.needs_input_grad[1]
    dx, da = entmax_rows_backward(y2, dy2, alpha, ctx.fixed, alpha_grad)
    return dx, (da if alpha_grad else None), None


entmax_rows.register_autograd(_entmax_rows_gradient, setup_context=_setup_context)


def _forward_rows(x2, alpha):
    if isinstance(alpha, float):
        return entmax_rows(x2, None, alpha)
    return entmax_rows(x2, alpha, 0.0)


def _backward_rows(y2, dy2, alpha, alpha_grad):
    if isinstance(alpha, float):
        dx, _ = entmax_rows_backward(y2, dy2, None, alpha, False)
        return dx, None
    dx, da = entmax_rows_backward(y2, dy2, alpha, 0.0, alpha_grad)
    return dx, (da if alpha_grad else None)


def _graph_backward(y, dy, alpha, dim, alpha_grad):
    """(dx, d alpha per row) as differentiable tensor ops on the output ``y`` (the reference's
    closed forms), for a gradient that has a history of its own: under
    ``torch.autograd.grad(..., create_graph=True)`` (a gradient penalty, a Hessian-vector
    product) the kernels' gradients would have none, and the second derivative would be
    silently dropped.  Almost everywhere (off the points where the support changes) the
    gradient is a smooth function of y, dy and alpha, so differentiating these ops gives the
    true second derivative."""
    rows = y.movedim(dim, -1)
    shape, dtype = rows.shape, _compute_dtype(y.dtype)
    y2 = rows.reshape(-1, shape[-1]).to(dtype)
    dy2 = dy.movedim(dim, -1).reshape(-1, shape[-1]).to(dtype)
    a = alpha if isinstance(alpha, float) else _alpha_rows(alpha, y, dim)
    dx2, da = reference.backward(y2, dy2, a, alpha_grad)
    return _from_rows(dx2, shape, dim, dy.dtype), da


def _fixed_forward(ctx, x, dim, alpha):
    x2, shape = _to_rows(x, dim)
    y2 = _forward_rows(x2, alpha)
    y = _from_rows(y2, shape, dim, x.dtype)
    ctx.save_for_backward(y2, y)  # y, the output, for a gradient with a history (_graph_backward)
    ctx.dim, ctx.shape = dim, shape
    return y


def _fixed_backward(ctx, dy, alpha):
    y2, y = ctx.saved_tensors
    if torch.is_grad_enabled():  # create_graph=True
        return _graph_backward(y, dy, alpha, ctx.dim, False)[0], None
    dy2, _ = _to_rows(dy, ctx.dim)
    dx2, _ = _backward_rows(y2, dy2, alpha, False)
    return _from_rows(dx2, ctx.shape, ctx.dim, dy.dtype), None


def _fixed_alpha_function(name, alpha, doc):
    """An autograd Function of entmax at the constant ``alpha``, for which the threshold has
    a closed form on its support (staticmethods closing over ``alpha``: torch.compile traces
    them, where it cannot trace classmethods)."""
    def forward(ctx, x, dim):
        return _fixed_forward(ctx, x, dim, alpha)

    def backward(ctx, dy):
        return _fixed_backward(ctx, dy, alpha)

    return type(name, (Function,), {"__doc__": doc, "ALPHA": alpha, "__module__": __name__,
                                    "forward": staticmethod(forward), "backward": staticmethod(backward)})


SparsemaxFunction = _fixed_alpha_function("SparsemaxFunction", 2.0, """sparsemax(x) = argmin_{p in simplex} ||p - x||^2 = [x - tau]_+
    (Martins & Astudillo, ICML 2016).  Jacobian: diag(s) - s s^T / |S|, s the support indicator.""")
Entmax15Function = _fixed_alpha_function("Entmax15Function", 1.5, """1.5-entmax(x) = [x/2 - tau]_+^2 (Peters, Niculae & Martins, ACL 2019).
    Jacobian: diag(g) - g g^T / sum g with g = sqrt(y).""")


class EntmaxAlphaFunction(Function):
    """alpha-entmax with a tensor alpha (one per row) and its gradient in alpha
    (Correia, Niculae & Martins, EMNLP 2019, Proposition 1)."""

    @staticmethod
    def forward(ctx, x, alpha, dim, check_alpha=True):
        x2, shape = _to_rows(x, dim)
        lowest = check_alpha_range(alpha) if check_alpha else None
        alpha_rows = _alpha_rows(alpha, x, dim)
        x2, alpha_rows = _precise(x2, alpha_rows, lowest)
        y2 = _forward_rows(x2, alpha_rows)
        y = _from_rows(y2, shape, dim, x.dtype)
        # y and alpha themselves, for a gradient with a history (_graph_backward).
        ctx.save_for_backward(y2, alpha_rows, y, alpha)
        ctx.dim, ctx.shape, ctx.alpha_shape, ctx.alpha_dtype = dim, shape, alpha.shape, alpha.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        y2, alpha_rows, y, alpha = ctx.saved_tensors
        alpha_grad = ctx.needs_input_grad[1]
        if torch.is_grad_enabled():  # create_graph=True
            dx, da_rows = _graph_backward(y, dy, alpha, ctx.dim, alpha_grad)
        else:
            dy2, _ = _to_rows(dy, ctx.dim)
            dy2 = dy2.to(y2.dtype)  # float64 where the forward pass needed it
            dx2, da_rows = _backward_rows(y2, dy2, alpha_rows, alpha_grad)
            dx = _from_rows(dx2, ctx.shape, ctx.dim, dy.dtype)
        dalpha = None
        if alpha_grad:
            # Back to alpha's broadcast shape: rows -> x's shape with size 1 at dim -> sum.
            da = da_rows.reshape(ctx.shape[:-1] + (1,)).movedim(-1, ctx.dim)
            dalpha = da.sum_to_size((1,) * (da.dim() - len(ctx.alpha_shape)) + tuple(ctx.alpha_shape))
            dalpha = dalpha.reshape(ctx.alpha_shape).to(ctx.alpha_dtype)
        return dx, dalpha, None, None


def _without_rows(x, dim, normalize):
    """The shapes the row kernels cannot take, handled as softmax handles them: a 0-d
    tensor is one row of one score (probability 1), and an empty tensor (no rows, or
    rows with no entries) gives an empty result.  None for every other shape."""
    if not x.is_floating_point():
        raise TypeError(f"entmax normalisers take floating-point scores, got a {x.dtype} tensor "
                        "(convert it with .float(), as softmax requires)")
    if not -max(x.dim(), 1) <= dim < max(x.dim(), 1):
        raise IndexError(f"dim {dim} is out of range for a tensor of {x.dim()} dimensions")
    if x.dim() == 0:
        return normalize(x.reshape(1), 0).reshape(())
    if x.numel() == 0:
        return x.clone()
    return None


def sparsemax(x, dim=-1):
    """Sparsemax along ``dim`` (exact)."""
    degenerate = _without_rows(x, dim, sparsemax)
    return degenerate if degenerate is not None else SparsemaxFunction.apply(x, dim)


def entmax15(x, dim=-1):
    """1.5-entmax along ``dim`` (exact)."""
    degenerate = _without_rows(x, dim, entmax15)
    return degenerate if degenerate is not None else Entmax15Function.apply(x, dim)


def entmax_alpha(x, alpha, dim=-1, check_alpha=True):
    """alpha-entmax along ``dim``, differentiable in ``x`` and ``alpha``.

    ``alpha`` is a float or a tensor in (1, 2] broadcastable to ``x`` with size 1
    along ``dim``; e.g. shape (1, H, 1, 1) gives one alpha per head for attention
    scores of shape (B, H, T, S).  ``check_alpha=False`` skips the range check, for
    callers whose alpha is in range by construction (``HeadAlpha``): on a GPU the
    check waits for the device on every call (and under ``torch.compile`` it breaks the
    graph).  It also skips the look at alpha that picks float64 below
    ``FLOAT32_ALPHA_MIN``, so such a caller's alpha must be at least that.
    """
    if not torch.is_tensor(alpha):
        # float64, so that an alpha just above 1 is neither rounded to 1 nor refused as 1.
        alpha = torch.tensor(float(alpha), dtype=torch.float64, device=x.device)
    degenerate = _without_rows(x, dim, lambda row, d: entmax_alpha(row, alpha, d, check_alpha))
    return degenerate if degenerate is not None else EntmaxAlphaFunction.apply(x, alpha, dim, check_alpha)


def support_size(p, dim=-1):
    """Number of nonzero entries of each distribution along ``dim``."""
    return (p > 0).sum(dim)
