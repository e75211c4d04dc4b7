"""Configurations of the fused attention kernels that the benchmarks time against the
package's own (``kernels.PACKAGE``); each gives the same attention, to rounding.
docs/notes/fused-attention.md has what each was measured at."""

from fairseq_sparse.entmax.kernels import KernelConfig

# The scores of keys that fit one tile recomputed on every pass, as before they were kept.
SCORES_RECOMPUTED = KernelConfig(one_tile=False)
