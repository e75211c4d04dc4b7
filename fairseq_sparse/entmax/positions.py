"""Positions for length extrapolation, as the attention entry point applies them.

- ``none`` (NoPE): no position information but the causal mask's.
- ``alibi``: each head adds ``-slope_h |i - j|`` to the score of query i and key j (Press,
  Smith & Lewis, "Train Short, Test Long", ICLR 2022), slopes ``2^(-8h/H)``, h = 1..H.
- ``rope``: queries and keys rotated by their position (Su et al., "RoFormer", 2021), in
  the rotate-half layout of transformers' Llama.
- ``nape``: ALiBi on the first half of the heads with slopes ``1/h``, none on the rest
  (Vasylenko, Pitorro, Martins & Treviso, "Long-Context Generalization with Sparse
  Attention", ICLR 2026), whose length scale applies to the unpositioned heads only.

Positions i and j count from the first key: a query's own position is ``i + Tk - Tq``,
the last query aligned with the last key, as the causal mask aligns them.
"""

import torch

POSITIONS = ("none", "alibi", "rope", "nape")
ROPE_BASE = 10000.0


def check_positions(positions, option="--positions"):
    if positions not in POSITIONS:
        raise ValueError(f"{option} {positions!r}: one of {', '.join(POSITIONS)}")
    return positions


def alibi_slopes(heads, positions):
    """(heads,) float32 ALiBi slopes of ``positions`` (zeros on the heads without a bias),
    or None where no head has one."""
    check_positions(positions)
    if positions == "alibi":
        return torch.pow(2.0, -8.0 * torch.arange(1, heads + 1, dtype=torch.float32) / heads)
    if positions == "nape":
        biased = heads // 2
        return torch.cat([1.0 / torch.arange(1, biased + 1, dtype=torch.float32), torch.zeros(heads - biased)])
    return None


def unpositioned_heads(heads, positions):
    """(heads,) bool: the heads that a length scale serves under ``positions`` (NAPE's
    heads without ALiBi; every head otherwise)."""
    check_positions(positions)
    scaled = torch.ones(heads, dtype=torch.bool)
    if positions == "nape":
        scaled[: heads // 2] = False
    return scaled


def alibi_bias(slopes, q_len, k_len, device):
    """(1, H, Tq, Tk) float32: ``-slope_h |i + Tk - Tq - j|`` (under a causal mask, the
    distance to each key the query sees)."""
    rows = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)
    distance = (rows - torch.arange(k_len, device=device)[None, :]).abs()
    return -slopes.to(device, torch.float32)[None, :, None, None] * distance.float()


def rotate(x, start=0, base=ROPE_BASE):
    """``x`` (B, H, T, D) rotated by RoPE at positions ``start`` .. ``start + T - 1``,
    D even, pairs (d, d + D/2) rotated together (the rotate-half layout)."""
    T, D = x.shape[-2], x.shape[-1]
    if D % 2:
        raise ValueError(f"rope positions need an even head width, got {D}")
    frequencies = base ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D)
    angles = torch.arange(start, start + T, device=x.device, dtype=torch.float32)[:, None] * frequencies[None, :]
    cos, sin = angles.cos().repeat(1, 2).to(x.dtype), angles.sin().repeat(1, 2).to(x.dtype)
    half = D // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
