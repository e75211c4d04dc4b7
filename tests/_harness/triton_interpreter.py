"""A speed-up of Triton's CPU interpreter for the tests, for the one Triton it was written for."""

import warnings

# The Triton release whose interpreter internals this patch reads (requirements.txt's).
WRITTEN_FOR = "3.9."


def apply():
    """Make Triton's interpreter patch triton.language once per helper per launch.

    Triton 3.9's interpreter patches triton.language for a kernel launch (and restores it
    after), and again at every call of a @triton.jit helper from the kernel: that runs
    inspect.getmembers over triton.language and its tensor and math modules each time,
    only to find them patched already.  The fused attention kernels call their helpers
    thousands of times per launch, and that was 43% of their time in the interpreter
    (9.3 s -> 5.3 s for one forward and backward at 2 x 5 heads x 17 x 33, bit for bit
    the same outputs and gradients).  The first call of each helper in a launch still
    patches as before, so a helper whose module sees a part of triton.language the
    kernel's does not still gets it.  On a Triton other than WRITTEN_FOR the interpreter
    is left as it is: slower, not broken."""
    try:
        import triton
        from triton.runtime import interpreter
    except ImportError:
        return
    if not triton.__version__.startswith(WRITTEN_FOR):
        warnings.warn(f"tests/_harness/triton_interpreter.py was written for Triton {WRITTEN_FOR}x, not "
                      f"{triton.__version__}: the interpreter runs unpatched (slower)")
        return
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
