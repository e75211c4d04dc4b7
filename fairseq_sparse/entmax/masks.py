"""The attention's masks, built in one place: which keys a query sees.

- ``visible``: the causal mask of every attention of the package (the last query aligned
  with the last key, as with cached keys), within a sliding window where one is named;
- ``sequence_ids`` / ``packed_ids``: packed sequences (FlashAttention's ``cu_seqlens``);
- ``hidden``: every mask of a call as one boolean, True where a score is masked, for the
  explicit path;
- ``keys_seen``: how many keys each query sees (a length scale's n), without a (Tq, Tk) mask;
- ``read_mask``: an arbitrary mask read back as the causal / padding / window / packing
  masks that the fused kernels take, where it is exactly those.
"""

import functools
import operator

import torch


def check_window(window, causal):
    """The sliding window as an int (a Python, numpy or torch integer), or None; refuses one
    that is not a positive whole number of keys, or without ``causal``."""
    if window is None:
        return None
    try:
        keys = None if isinstance(window, (bool, float)) else operator.index(window)
    except TypeError:
        keys = None
    if keys is None or keys < 1:
        raise ValueError(f"attention: window must be a positive number of keys, got {window!r}")
    if not causal:
        raise ValueError("attention: a sliding window is causal here; give causal=True with window")
    return keys


def visible(q_len, k_len, device, rows=None, window=None):
    """(Tq, Tk) bool: query i sees key j <= i + Tk - Tq, the causal mask of every attention of
    the package (the last query sees every key, as with cached keys), and with ``window`` only
    j > i + Tk - Tq - window (a sliding window); with ``rows`` (query indices), only those
    rows, so that a chunk of queries never builds the whole mask."""
    rows = torch.arange(q_len, device=device) if rows is None else rows
    keys, last = torch.arange(k_len, device=device)[None, :], rows[:, None] + (k_len - q_len)
    seen = keys <= last
    return seen if window is None else seen & (keys > last - window)


def packed_ids(cu_seqlens, length, device):
    """(1, length) each position's sequence: positions cu_seqlens[s]:cu_seqlens[s + 1] are
    sequence s; offsets that do not rise from 0 to ``length`` are refused."""
    cu_seqlens = torch.as_tensor(cu_seqlens)  # a list or array of offsets too
    cu = cu_seqlens.to(device, torch.long)
    if cu.dim() != 1 or len(cu) < 2 or cu_seqlens.dtype.is_floating_point:
        raise ValueError(f"attention: cu_seqlens must be (S + 1,) integers, got {tuple(cu_seqlens.shape)}")
    if int(cu[0]) != 0 or int(cu[-1]) != length or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"attention: cu_seqlens must rise from 0 to T = {length}, got {cu_seqlens.tolist()}")
    return torch.repeat_interleave(torch.arange(len(cu) - 1, device=device), cu.diff())[None]


def sequence_ids(cu_seqlens, q, k):
    """(1, T) each position's sequence from ``cu_seqlens`` (None without it), refusing what
    does not describe packed sequences of q and k."""
    if cu_seqlens is None:
        return None
    if q.shape[0] != 1 or k.shape[2] != q.shape[2]:
        raise ValueError(f"attention: cu_seqlens packs sequences into one batch row of as many queries as keys, got "
                         f"q {tuple(q.shape)} and k {tuple(k.shape)}")
    return packed_ids(cu_seqlens, q.shape[2], q.device)


def hidden(q_len, k_len, device, causal=False, window=None, key_padding_mask=None, segments=None, mask=None,
           sparse=True, rows=None):
    """True where a score is masked, broadcastable to the scores (B, H, len(rows), Tk), or None
    where nothing is.  ``rows``: the query indices of a chunk (None: all of them).  ``mask``:
    any other mask broadcastable to (B, H, Tq, Tk), bool (True: attend) or additive, whose
    dtype's lowest values mask exactly where ``sparse`` (a query that sees no key then gets
    zeros from a sparse normaliser, not a uniform row; softmax adds it to the scores)."""
    parts = []
    if segments is not None:
        at = segments if rows is None else segments[:, rows]
        parts.append(at[:, None, :, None] != segments[:, None, None, :])
    if causal:
        parts.append(~visible(q_len, k_len, device, rows, window))
    if key_padding_mask is not None:
        parts.append(key_padding_mask[:, None, None, :])
    if mask is not None:
        mask = mask_rows(mask, q_len, rows)
        if mask.dtype == torch.bool:
            parts.append(~mask)
        elif sparse:
            parts.append(mask <= torch.finfo(mask.dtype).min)
    return functools.reduce(torch.logical_or, parts) if parts else None


def mask_rows(mask, q_len, rows):
    """The rows ``rows`` of a mask broadcastable to (..., Tq, Tk) (all of them for None)."""
    if rows is None or mask.shape[-2] != q_len or q_len == 1:
        return mask
    return mask[..., rows, :]


def keys_seen(q_len, k_len, device, causal=False, key_padding_mask=None, window=None, cu_seqlens=None):
    """(B or 1, Tq) long: how many keys each query may see under these masks (the n of a
    length scale), at least 1: under ``causal`` the unpadded keys up to its own (within
    ``window``), else every unpadded key; with packed sequences (``cu_seqlens``), only
    those of its own sequence.  O(Tq + Tk): no (Tq, Tk) mask is built."""
    kept = (~key_padding_mask).long() if key_padding_mask is not None \
        else torch.ones(1, k_len, dtype=torch.long, device=device)
    before = torch.nn.functional.pad(kept.cumsum(1), (1, 0))  # (B, Tk + 1): unpadded keys before each index
    rows = torch.arange(q_len, device=device)
    last = rows + (k_len - q_len) if causal else torch.full_like(rows, k_len - 1)
    first = torch.zeros_like(rows)
    if cu_seqlens is not None:
        cu = torch.as_tensor(cu_seqlens).to(device, torch.long)
        sequence = packed_ids(cu, q_len, device)[0]
        first = cu[sequence]
        if not causal:
            last = cu[sequence + 1] - 1
    if window is not None:
        first = torch.maximum(first, last - window + 1)
    return (before[:, last + 1] - before[:, first]).clamp(min=1)


def read_mask(mask, causal, key_padding_mask, batch, q_len, k_len, window=None, cu_seqlens=None):
    """(causal, key_padding_mask, window, cu_seqlens) that give exactly what ``mask``,
    ``causal``, ``key_padding_mask`` and ``cu_seqlens`` mask together, as the fused kernels take
    them, or None where ``mask`` is something else (a window other than ``window``, a bias).
    Reading a mask compares it whole, which waits for the device once per call."""
    if mask is None:
        return causal, key_padding_mask, (window if causal else None), cu_seqlens
    if cu_seqlens is not None:  # a mask beside packed sequences is left to the explicit path
        return None
    if mask.dtype == torch.bool:
        masked = ~mask[:, 0]
    else:
        masked = mask[:, 0] <= torch.finfo(mask.dtype).min  # the dtype's lowest, or -inf
        if not bool(((mask[:, 0] == 0) | masked).all()):
            return None  # an additive bias, not a mask
    masked = masked.expand(batch, q_len, k_len)  # a mask shared by the batch or the queries, too
    if key_padding_mask is not None:
        masked = masked | key_padding_mask[:, None, :]
    if window is not None:
        # Causal within the window: a key is padding where every query whose window holds it masks it.
        outside = ~visible(q_len, k_len, masked.device, window=window)
        padding = (masked | outside).all(1)
        if torch.equal(masked, padding[:, None, :] | outside):
            return True, (padding if bool(padding.any()) else None), window, None
    padding = masked[:, -1, :]  # the last query sees every key that is not padding
    expected = padding[:, None, :].expand(-1, q_len, -1)
    if causal or bool((masked & ~expected).any()):  # a query sees fewer keys than the last: causal, if anything
        causal, expected = True, expected | ~visible(q_len, k_len, masked.device)
    if not torch.equal(masked, expected):
        return _packed(masked, window)
    return causal, (padding if bool(padding.any()) else None), None, None


def _packed(masked, window):
    """(causal, None, window, cu_seqlens) where ``masked`` (1, T, T) is packed sequences, each
    query seeing its own sequence's keys (all of them, or causally, within ``window`` where
    that is named), else None.  A sequence starts where a query's first visible key is itself."""
    if masked.shape[0] != 1 or masked.shape[1] != masked.shape[2]:
        return None
    seen = ~masked[0]
    T = seen.shape[0]
    if not bool(seen.any(1).all()):  # a query that sees nothing: padding, not packing
        return None
    positions = torch.arange(T, device=seen.device)
    starts = seen.to(torch.uint8).argmax(1) == positions
    segments = starts.cumsum(0)
    same = segments[:, None] == segments[None, :]
    for causal, shape in ((False, same), (True, same & visible(T, T, seen.device, window=window))):
        if torch.equal(seen, shape):
            cu_seqlens = torch.cat([positions[starts], positions.new_tensor([T])])
            return causal, None, (window if causal else None), cu_seqlens
    return None
