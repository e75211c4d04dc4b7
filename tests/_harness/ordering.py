"""The order the suite's tests start in."""

# The modules whose tests take half a minute to three minutes each (end-to-end runs of the
# scripts, compiling every kernel for sm_90, the GPU step's input families on CPU, fairseq
# training and report rendering): started last, they would leave one pytest-xdist worker
# running them alone at the end.
LONG_FIRST = ("tests/scripts/", "tests/entmax/test_kernel_ptx.py", "tests/entmax/test_bench_attention_gpu.py",
              "tests/ape/test_task.py", "tests/sparse_transformer/test_capture.py",
              "tests/sparse_transformer/test_report.py")


def long_first(items):
    """The long tests (``LONG_FIRST``) first, in their order there, then the rest as collected."""
    def rank(item):
        return next((i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)), len(LONG_FIRST))

    items.sort(key=rank)
