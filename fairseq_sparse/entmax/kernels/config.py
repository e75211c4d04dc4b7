"""How the fused attention kernels are laid out on the device, and the constants every phase
reads: never what they compute (every configuration gives the same attention, to rounding).

Globals that a jitted function reads must be ``tl.constexpr``; the plain ints beside them
are for the host.
"""

import dataclasses
import os
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from ..reference import newton_tol

# Triton's interpreter (read by triton.jit when the kernels are decorated): CPU tensors run
# the kernels' own code through numpy, which is how a machine without a GPU tests them.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
TINY = tl.constexpr(1.1754943508222875e-38)  # smallest normal float32

# Which closed form finishes the threshold (constexpr FIXED: one compiled kernel each).
GENERIC, SPARSEMAX, ENTMAX15 = 0, 1, 2

# Row statistics the forward pass leaves for the backward pass (float32, one row each).
STAT_MAX, STAT_TAU, STAT_G, STAT_P, STAT_MU, STAT_C = range(6)
NUM_STATS = 6
# The forward's diagnostics (``KernelConfig.diagnostics``), one row each: the passes over
# the key tiles made for a row's query tile, and the key tiles whose scores it computed.
DIAG_PASSES, DIAG_TILES = range(2)
NUM_DIAGNOSTICS = 2
# CAUSAL's value for a causal mask within a sliding window (0: none, 1: causal).
WINDOWED = 2
# Tile maxima each row keeps from the maxima's pass: Newton's start, and its bounds on the
# tiles that may hold support (``threshold.may_hold``).
KEPT_SLOTS = 8
# Below this, sc (the alpha gradient's statistic) is summed term by term rather than in
# closed form (``forward_pass._alpha_statistics``): float32 then keeps dalpha to about 1e-4
# of its size.
SC_CLOSED = tl.constexpr(1e-2)
SUBSET_NEWTON_STEPS = tl.constexpr(8)
# Relative margin of the cut below which a key tile is skipped (``threshold.support_cut``), and of
# Newton's start below the kept maxima's threshold: far above float32's rounding of the
# scores and thresholds.
CUT_MARGIN = tl.constexpr(2e-6)
SUBSET_MARGIN = tl.constexpr(2e-6)
# Widest head the tiles take (q, the output and og accumulators sit in registers).
MAX_HEAD_DIM = 128
# On CUDA the forward kernel takes up to this many keys in one tile (as wide as the next
# power of two, at least 16, tl.dot's least), so that training batches of sentences read
# q and k once (KernelConfig.one_tile).
ONE_TILE_KEYS = 64

NUM_STATS_C = tl.constexpr(NUM_STATS)
NUM_DIAGNOSTICS_C = tl.constexpr(NUM_DIAGNOSTICS)
WINDOWED_C = tl.constexpr(WINDOWED)
KEPT_SLOTS_C = tl.constexpr(KEPT_SLOTS)
STAT_MAX_C, STAT_TAU_C, STAT_G_C, STAT_P_C, STAT_MU_C, STAT_C_C = (tl.constexpr(i) for i in range(NUM_STATS))
DIAG_PASSES_C, DIAG_TILES_C = (tl.constexpr(i) for i in range(NUM_DIAGNOSTICS))


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """How the fused kernels run; the defaults are the package's (``PACKAGE``).

    - ``one_tile``: keys that fit one tile have their scores computed once and kept in
      registers for every pass of the forward kernel (up to ``ONE_TILE_KEYS`` on CUDA).
    - ``tiles``: (BLOCK_M, BLOCK_N, num_warps, num_stages or None) for every kernel,
      whatever the head dim and device, instead of the device's default (and then no
      one-tile widening).
    - ``tolerance``: Newton's tolerance on its step instead of the package's for the
      inputs' dtype (``tolerance``); a runtime argument of the forward kernel.
    - ``diagnostics``: the forward kernel also counts, per row, its passes over the key
      tiles and the tiles it computed scores for (benchmarks read them); a compile-time
      switch, off in production, where nothing is counted or written.
    """
    one_tile: bool = True
    tiles: Optional[Tuple[int, int, int, Optional[int]]] = None
    tolerance: Optional[float] = None
    diagnostics: bool = False

    def __post_init__(self):
        if self.tiles is not None:
            if len(self.tiles) == 3:
                object.__setattr__(self, "tiles", (*self.tiles, None))
            block_m, block_n, warps, _ = self.tiles
            if min(block_m, block_n) < 16 or block_m & (block_m - 1) or block_n & (block_n - 1) or warps < 1:
                raise ValueError(f"KernelConfig(tiles={self.tiles}): tiles are powers of two of at least 16 (tl.dot's "
                                 "least), with at least one warp")


PACKAGE = KernelConfig()


def fixed_kind(alpha):
    """The kernels' FIXED constant for ``alpha``: SPARSEMAX or ENTMAX15 for those constant
    alphas (closed-form thresholds), GENERIC for any other and for a tensor alpha."""
    if isinstance(alpha, float):
        return {2.0: SPARSEMAX, 1.5: ENTMAX15}.get(alpha, GENERIC)
    return GENERIC


def supports(q):
    """Tensors these kernels take: on CUDA, or on CPU under Triton's interpreter."""
    return (q.is_cuda or (INTERPRET and q.device.type == "cpu")) \
        and q.dtype in (torch.float32, torch.float16, torch.bfloat16)


def blocks(d, device_type, config=PACKAGE):
    """(BLOCK_M, BLOCK_N, BLOCK_D, launch options)."""
    block_d = max(16, triton.next_power_of_2(d))
    if config.tiles is not None:
        block_m, block_n, warps, stages = config.tiles
        return block_m, block_n, block_d, dict(num_warps=warps, **({} if stages is None else dict(num_stages=stages)))
    if device_type == "cpu":  # the interpreter: small tiles keep the numpy work small
        return 16, 16, block_d, dict(num_warps=1)
    if block_d <= 64:
        return 64, 64, block_d, dict(num_warps=4)
    return 64, 32, block_d, dict(num_warps=4)


def forward_blocks(d, keys, device_type, config=PACKAGE):
    """(BLOCK_M, BLOCK_N, BLOCK_D, launch options, one tile) of the forward kernel for
    ``keys`` keys: on CUDA, unless ``config.tiles`` is set, up to ONE_TILE_KEYS keys fit one
    tile of the next power of two; the interpreter keeps its small tiles."""
    block_m, block_n, block_d, launch = blocks(d, device_type, config)
    if config.one_tile and device_type == "cuda" and config.tiles is None and keys <= ONE_TILE_KEYS:
        block_n = max(16, triton.next_power_of_2(keys))
    return block_m, block_n, block_d, launch, config.one_tile and keys <= block_n


def precision(q):
    """The products' precision: float32 inputs get float32 products (tensor cores would round
    them to tf32); "interpret" on CPU (``tiles._dot``)."""
    if q.device.type == "cpu":
        return "interpret"
    return "ieee" if q.dtype == torch.float32 else "tf32"


def tolerance(q, fixed, config=PACKAGE):
    """Newton's tolerance on its step, float32's unless a generic alpha meets half-precision
    inputs: there it is float16's (5.5e-3, so the threshold is left within about 3e-5),
    which saves Newton passes while the outputs stay within their own rounding and the
    alpha gradient moves by under 1e-4 of itself (bfloat16's own tolerance would move dq
    visibly; docs/notes/fused-attention.md has the measurements).  The fixed alphas keep float32's:
    their closed-form threshold needs the support exact."""
    if config.tolerance is not None:
        return config.tolerance
    half = q.dtype in (torch.float16, torch.bfloat16) and fixed == GENERIC
    return newton_tol(torch.float16 if half else torch.float32)
