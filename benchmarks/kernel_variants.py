"""Configurations of the fused attention kernels that the benchmarks time or count against
the package's own (``attention_kernel.PACKAGE``).  None is the package's choice; each
gives the same attention, to rounding.  docs/sparse_transformer.md has what each was measured at."""

from fairseq_sparse.entmax.attention_kernel import KernelConfig

# Plain Newton from 0, then the threshold on the support.
PLAIN_SOLVER = KernelConfig(certify=False, tile_start=False)
# Certified thresholds (alpha = 2 and 1.5), Newton from 0.
CERTIFIED_FROM_ZERO = KernelConfig(certify=True, tile_start=False)
# A richer start, 4 scores kept per key tile in 32 slots: fewer passes, but a maxima's
# pass that costs about one pass per score kept.
KEPT_CANDIDATE = (4, 32)
# The scores of keys that fit one tile recomputed on every pass, as before they were kept.
SCORES_RECOMPUTED = KernelConfig(one_tile=False)
