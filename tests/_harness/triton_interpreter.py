"""Speed-ups of Triton's CPU interpreter for the tests, for the one Triton they were written for.

Each leaves what a kernel computes, and what the interpreter checks, unchanged: one skips
a repeated patching of triton.language that finds it patched already, one skips
integer-overflow checks whose assertion Triton drops outside debug mode, one returns two
operands of one shape as they are without comparing them dimension by dimension first,
and one remembers what Triton's frontend derives again, op after op, from values that
cannot change (a dtype's numpy dtype, a block type's shape and name, a tensor's shape as
constexprs)."""

import warnings

# The Triton release whose interpreter internals this patch reads (requirements.txt's).
WRITTEN_FOR = "3.9."


def apply():
    """Apply every speed-up below where Triton is WRITTEN_FOR; elsewhere leave the
    interpreter as it is (slower, not broken) and say so."""
    try:
        import triton
        from triton.language import core, semantic
        from triton.runtime import interpreter
    except ImportError:
        return
    if not triton.__version__.startswith(WRITTEN_FOR):
        warnings.warn(f"tests/_harness/triton_interpreter.py was written for Triton {WRITTEN_FOR}x, not "
                      f"{triton.__version__}: the interpreter runs unpatched (slower)")
        return
    patch_language_once_per_launch(interpreter)
    remember_derived_types(core, interpreter)
    skip_unasserted_overflow_checks(semantic)
    skip_broadcasts_of_equal_shapes(core, semantic)


def patch_language_once_per_launch(interpreter):
    """Make Triton's interpreter patch triton.language once per helper per launch.

    Triton 3.9's interpreter patches triton.language for a kernel launch (and restores it
    after), and again at every call of a @triton.jit helper from the kernel: that runs
    inspect.getmembers over triton.language and its tensor and math modules each time,
    only to find them patched already.  The fused attention kernels call their helpers
    thousands of times per launch.  The first call of each helper in a launch still
    patches as before, so a helper whose module sees a part of triton.language the
    kernel's does not still gets it.  On a Triton other than WRITTEN_FOR the interpreter
    is left as it is: slower, not broken."""
    launch, helper_call = interpreter.GridExecutor.__call__, interpreter.InterpretedFunction.__call__
    patched = set()

    def launch_once(self, *args, **kwargs):
        patched.clear()
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.clear()

    def call_helper(self, *args, **kwargs):
        if self.fn not in patched:
            patched.add(self.fn)
            return helper_call(self, *args, **kwargs)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # as Triton's own call reports it
            raise interpreter.InterpreterError(repr(e)) from e

    interpreter.GridExecutor.__call__ = launch_once
    interpreter.InterpretedFunction.__call__ = call_helper


def remember_derived_types(core, interpreter):
    """Triton's frontend type-checks every interpreted op as it would for the compiler: it
    builds a new block_type (unwrapping and validating its shape, formatting its name), a
    new tensor's shape as constexprs, and a dtype's numpy dtype from a fresh table, each
    time.  All three are functions of immutable values (a dtype, a shape of ints, a type),
    so the first result is kept and copied into the later objects.  The objects are
    still new and equal to what Triton would build, field by field."""
    np_dtype = interpreter._get_np_dtype
    np_dtypes = {}

    def get_np_dtype(tt_dtype):
        try:
            return np_dtypes[tt_dtype]
        except KeyError:
            np_dtypes[tt_dtype] = found = np_dtype(tt_dtype)
            return found
        except TypeError:  # an unhashable type (a pointer's): derived as before
            return np_dtype(tt_dtype)

    block_init = core.block_type.__init__
    blocks = {}

    def init_block_type(self, element_ty, shape):
        # What __init__ derives (shape, numel, name) is a function of the shape's ints and
        # the element type's name; element_ty itself is the one given.
        values = shape.values if type(shape) is core.tuple else shape
        dims = tuple(d.value if type(d) is core.constexpr else d for d in values) \
            if type(values) in (list, tuple) else None
        if dims is None or not all(type(d) is int for d in dims):
            return block_init(self, element_ty, shape)
        key = (str(element_ty), dims)
        fields = blocks.get(key)
        if fields is None:
            block_init(self, element_ty, shape)
            blocks[key] = {name: value for name, value in vars(self).items() if name != "element_ty"}
        else:
            vars(self).update(fields)
            self.element_ty = element_ty

    tensor_init = core.tensor.__init__
    shapes = {}

    def init_tensor(self, handle, type):
        # numel and shape (as constexprs) are functions of the type's block shape.
        block = type.shape if type.is_block() else ()
        fields = shapes.get(block)
        if fields is None:
            tensor_init(self, handle, type)
            shapes[block] = {"numel": self.numel, "shape": self.shape}
        else:
            self.handle, self.type, self.dtype = handle, type, type.scalar
            vars(self).update(fields)

    interpreter._get_np_dtype = get_np_dtype
    core.block_type.__init__ = init_block_type
    core.tensor.__init__ = init_tensor


def skip_unasserted_overflow_checks(semantic):
    """Triton checks every integer +, - and * for overflow by redoing it in int64 and
    comparing with the type's bounds, then hands the result to device_assert, which
    outside debug mode (TRITON_DEBUG unset, as on the GPU by default) emits nothing: the
    interpreter computes the check on every op only to drop it.  Outside debug mode the
    check is skipped; in debug mode it runs and asserts as before."""
    check = semantic.TritonSemantic.binary_op_sanitize_overflow_impl

    def check_if_asserted(self, lhs, rhs, binary_op):
        if self.builder.options.debug:
            return check(self, lhs, rhs, binary_op)

    semantic.TritonSemantic.binary_op_sanitize_overflow_impl = check_if_asserted


def skip_broadcasts_of_equal_shapes(core, semantic):
    """Before every binary op Triton broadcasts its operands to one shape: for two blocks
    it compares them dimension by dimension through its constexpr tuples, and where the
    shapes are already equal (most ops of a kernel) returns both operands as they are, as
    it does for two scalars.  Those two cases return at once; every other goes through
    Triton's own broadcast."""
    broadcast = semantic.TritonSemantic.broadcast_impl_value

    def dims(shape):
        return shape.values if type(shape) is core.tuple else list(shape)

    def broadcast_unless_equal(self, lhs, rhs):
        lhs_block, rhs_block = lhs.type.is_block(), rhs.type.is_block()
        if lhs_block and rhs_block:
            if dims(lhs.type.shape) == dims(rhs.type.shape):
                return lhs, rhs
        elif not lhs_block and not rhs_block:
            return lhs, rhs
        return broadcast(self, lhs, rhs)

    semantic.TritonSemantic.broadcast_impl_value = broadcast_unless_equal
