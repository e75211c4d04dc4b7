"""Inputs for measuring sparse attention: the families the kernel tests and benchmarks take.

- ``gaussian``: q, k, v ~ N(0, 1), as the earlier benchmarks drew them.  Their scores have
  no structure, so entmax's support is spread over every key tile.
- ``structured``: the structure trained attention has (a local band around the query's
  position, a few global keys every query attends to, a diffuse rest), with the *block
  density*, the share of (query tile, key tile) pairs that hold support, as the parameter.
- ``captured``: the q, k and v a trained model's attention saw, with its heads' alphas
  (``capture_hf.capture`` writes them for a Hugging Face model, ``capture_fairseq.capture``
  for a fairseq transformer's packed sentences, both through ``capture_attention.py``;
  :func:`captured` reads them).

The scores come from q and k, since the kernels compute them: with random Fourier features
phi of the positions (Rahimi & Recht, 2007), phi(i).phi(j) ~ exp(-(i - j)^2 / (2 w^2)), and

    q_i = [sqrt(a) phi(i), sqrt(g), sigma n_i],   k_j = [sqrt(a) phi(j), sqrt(g) [j global], m_j]

the score is a kernel of width w around the diagonal, g on the global keys and noise of
spread sigma (the diffuse rest; the features' own error adds some).  More noise lets more
scattered keys into the support, so the block density rises with sigma from what the band
and the global keys hold alone; :func:`structured` finds the sigma that gives the block
density asked for, measured on the attention itself (:func:`block_density`).  The band's
width and the number of global keys are read off captured attention by :func:`fit`.
"""

import math
from typing import NamedTuple, Optional

import torch

from fairseq_sparse.entmax import AttentionOptions, attend, get_normalizer
from fairseq_sparse.entmax.masks import packed_ids, visible
from fairseq_sparse.entmax.normalizers import fixed_alpha_normalizer

# The share of dimensions of q and k that carry the band, and that carry noise.
BAND_SHARE, NOISE_SHARE = 0.75, 0.2


def entmax_attend(q, k, v, alpha, key_padding_mask=None, **options):
    """``attend``'s output with alpha-entmax at ``alpha``: a float (2: sparsemax, 1.5:
    1.5-entmax, else alpha-entmax at that alpha on every head) or one alpha per head, (H,),
    whose values are read to check them (no bound is promised); ``options``: the fields of
    ``AttentionOptions`` (``fused=False``: the explicit path)."""
    if not torch.is_tensor(alpha) and float(alpha) in (1.5, 2.0):
        normalizer, heads = fixed_alpha_normalizer(alpha), None
    else:
        normalizer = get_normalizer("alpha_entmax")
        heads = alpha if torch.is_tensor(alpha) else torch.full(
            (q.shape[1],), float(alpha), dtype=torch.float64 if q.dtype == torch.float64 else torch.float32,
            device=q.device)
    out, _ = attend(q, k, v, normalizer, alpha=heads, options=AttentionOptions(**options),
                    key_padding_mask=key_padding_mask)
    return out


def explicit_attend(q, k, v, alpha, **kw):
    """:func:`entmax_attend` on the explicit path: the reference of the fused kernels."""
    return entmax_attend(q, k, v, alpha, fused=False, **kw)


def gaussian(batch, heads, length, head_dim, seed=0):
    """(q, k, v) ~ N(0, 1), float32 on CPU."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch, heads, length, head_dim)
    return tuple(torch.randn(shape, generator=g) for _ in range(3))


class Capture(NamedTuple):
    """One attention module's captured inputs: q, k, v (B, H, T, D) float32, its heads' alphas,
    its scale, its name, whether it is causal, and the packed sequences' offsets (None: one
    sequence, every query sees every key the mask leaves)."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    alpha: torch.Tensor
    scale: float
    module: str
    causal: bool = False
    cu_seqlens: Optional[torch.Tensor] = None


def captured(path):
    """[:class:`Capture`] per attention module of a capture saved with ``torch.save(capture(...),
    path)`` (either module's ``capture``)."""
    return captured_layers(torch.load(path, map_location="cpu"))


def captured_layers(saved):
    """[:class:`Capture`] per attention module of what a ``capture`` returned."""
    return [Capture(layer["q"].float(), layer["k"].float(), layer["v"].float(), layer["alpha"], saved["scale"],
                    layer["module"], layer.get("causal", False), layer.get("cu_seqlens"))
            for layer in saved["layers"]]


def banded(batch, heads, length, head_dim, width, strength=8.0, global_keys=2, global_strength=7.0, noise=1.0,
           seed=0):
    """(q, k, v) whose scores (at scale 1 / sqrt(head_dim)) are a band of ``width`` positions
    around the diagonal of height ``strength``, ``global_keys`` keys (spread over the
    sequence, different per head) that every query scores ``global_strength`` higher, and
    N(0, noise^2)-like noise."""
    g = torch.Generator().manual_seed(seed)
    band = max(2, int(head_dim * BAND_SHARE) // 2 * 2)
    spread = max(1, int(head_dim * NOISE_SHARE))
    if band + 1 + spread > head_dim:
        raise ValueError(f"head_dim {head_dim}: too narrow for the band, global and noise features")
    root = math.sqrt(math.sqrt(head_dim))  # q.k * head_dim^-1/2 = the scores asked for
    positions = torch.arange(length, dtype=torch.float64)
    q = torch.zeros(batch, heads, length, head_dim, dtype=torch.float64)
    k = torch.zeros_like(q)
    for h in range(heads):
        freq = torch.randn(band // 2, generator=g, dtype=torch.float64) / width
        phase = freq[None, :] * positions[:, None]
        features = torch.cat([phase.cos(), phase.sin()], dim=1) * math.sqrt(2.0 / band)  # phi(i).phi(j)
        q[:, h, :, :band] = features * math.sqrt(strength) * root
        k[:, h, :, :band] = features * math.sqrt(strength) * root
        q[:, h, :, band] = math.sqrt(global_strength) * root
        chosen = torch.randperm(length, generator=g)[:global_keys]
        k[:, h, chosen, band] = math.sqrt(global_strength) * root
        q[:, h, :, band + 1:band + 1 + spread] = torch.randn(batch, length, spread, generator=g, dtype=torch.float64) \
            * root * math.sqrt(noise / math.sqrt(spread))
        k[:, h, :, band + 1:band + 1 + spread] = torch.randn(batch, length, spread, generator=g, dtype=torch.float64) \
            * root * math.sqrt(noise / math.sqrt(spread))
    v = torch.randn(batch, heads, length, head_dim, generator=g)
    return q.float(), k.float(), v


@torch.no_grad()
def block_density(q, k, alpha, tiles=(64, 64), causal=False):
    """The share of (query tile, key tile) pairs, among those the causal mask leaves, whose
    attention (normalised by entmax with ``alpha``) holds a nonzero weight; and the share of
    nonzero weights among the allowed (query, key) pairs."""
    Tk = k.shape[2]
    if Tk > 4096:
        raise ValueError(f"block_density: {Tk} keys; measured up to 4,096")
    eye = torch.eye(Tk, dtype=q.dtype).expand(*q.shape[:2], Tk, Tk)
    p = explicit_attend(q, k, eye, alpha, causal=causal)  # the probabilities themselves
    tiles_held, weights = _held(p, causal, None, tiles)
    return float(tiles_held.mean()), float(weights.mean())


def _allowed(Tq, Tk, causal, cu_seqlens, device):
    """(Tq, Tk) bool: the (query, key) pairs the causal mask and packed sequences leave."""
    allowed = visible(Tq, Tk, device) if causal else torch.ones(Tq, Tk, dtype=torch.bool, device=device)
    if cu_seqlens is not None:
        ids = packed_ids(cu_seqlens, Tk, device)[0]
        allowed = allowed & (ids[:, None] == ids[None, :])
    return allowed


def _held(p, causal, cu_seqlens, tiles):
    """Per (batch, head) of weights p (..., Tq, Tk): the share of the tile pairs in the causal
    mask's reach (the kernels' block density) that hold a nonzero weight, and the share of the
    pairs the causal mask and packed sequences leave that do."""
    Tq, Tk = p.shape[-2:]
    allowed = _allowed(Tq, Tk, causal, cu_seqlens, p.device)
    bm, bn = tiles
    nm, nn = math.ceil(Tq / bm), math.ceil(Tk / bn)
    pad = (0, nn * bn - Tk, 0, nm * bm - Tq)
    held = torch.nn.functional.pad((p > 0).float(), pad).unflatten(-1, (nn, bn)).unflatten(-3, (nm, bm)).amax((-1, -3))
    reach = torch.nn.functional.pad(_allowed(Tq, Tk, causal, None, p.device).float(), pad)
    reach = reach.view(nm, bm, nn, bn).amax((1, 3))
    return held.sum((-1, -2)) / reach.sum(), ((p > 0) & allowed).sum((-1, -2)) / allowed.sum()


class Fit(NamedTuple):
    """:func:`fit`'s result: the band's width (positions) and the global keys (per head) with
    which :func:`structured` draws attention like a capture's, the block density it was fitted
    at, and the capture's mean local distance with the generated one's."""
    width: float
    global_keys: int
    density: float
    distance: float
    fitted_distance: float


def _weights(q, k, alpha, causal=False, scale=None, cu_seqlens=None):
    """(H, T, T) float64 attention weights of batch row 0."""
    T = q.shape[2]
    eye = torch.eye(T, dtype=torch.float64).expand(*q.shape[:2], T, T)
    alpha = alpha.double() if torch.is_tensor(alpha) else alpha
    return explicit_attend(q.double(), k.double(), eye, alpha, causal=causal, scale=scale,
                           cu_seqlens=cu_seqlens)[0]


@torch.no_grad()
def attention_density(layer, alpha=None):
    """The share of the (query, key) pairs a captured module's masks leave (causal, packed
    sequences) that hold a nonzero weight, over its heads, at ``alpha`` (default its own)."""
    p = _weights(layer.q, layer.k, layer.alpha if alpha is None else alpha, layer.causal, layer.scale,
                 layer.cu_seqlens)
    T = p.shape[-1]
    return float(_held(p, layer.causal, layer.cu_seqlens, (T, T))[1].mean())


def _shape(p, global_share):
    """([global keys per head], [mean distance per head]) of weights p (H, T, T): a head's
    global keys draw at least ``global_share`` of all its weight (a diffuse key draws 1 / T of
    it); its distance is the mean |i - j| over its other keys, weighted by the attention."""
    T = p.shape[-1]
    is_global = p.sum(1) / T >= global_share  # (H, Tk)
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs().double()
    local = p.masked_fill(is_global[:, None, :], 0.0)
    return is_global.sum(-1).tolist(), ((local * distance).sum((1, 2)) / local.sum((1, 2)).clamp_min(1e-12)).tolist()


@torch.no_grad()
def fit(layers, tiles=(64, 64), global_share=0.05, steps=8):
    """The :class:`Fit` of captured attention (``captured``'s records, each module at its own
    heads' alphas, one sequence each): the global keys are the median head's; the width is
    found by bisection (on its logarithm) so that :func:`structured` inputs at the capture's
    median block density have the capture's median distance between query and key (the
    band's, the diffuse rest's and the packing's together), at 1.5-entmax."""
    globals_, distances, densities = [], [], []
    for layer in layers:
        p = _weights(layer.q, layer.k, layer.alpha, layer.causal, layer.scale, layer.cu_seqlens)
        heads_globals, heads_distances = _shape(p, global_share)
        globals_ += heads_globals
        distances += heads_distances
        densities += _held(p, layer.causal, layer.cu_seqlens, tiles)[0].tolist()
    g = int(torch.tensor(globals_).median())
    distance, density = float(torch.tensor(distances).median()), float(torch.tensor(densities).median())
    first = layers[0]
    T, D = first.q.shape[2], first.q.shape[3]
    low, high = 0.0, math.log(T / 2)
    best = None
    for _ in range(steps):
        width = math.exp((low + high) / 2)
        q, k, _, _, _ = structured(1, 1, T, D, density, tiles=tiles, width=width, global_keys=g)
        got = _shape(_weights(q, k, 1.5), global_share)[1][0]
        if best is None or abs(got - distance) < abs(best[1] - distance):
            best = (width, got)
        low, high = (math.log(width), high) if got < distance else (low, math.log(width))
    return Fit(best[0], g, density, distance, best[1])


def structured(batch, heads, length, head_dim, target, alpha=1.5, tiles=(64, 64), causal=False, seed=0, steps=10,
               width=16.0, global_keys=2):
    """(q, k, v, measured block density, noise): :func:`banded` inputs (a band of ``width``
    positions) whose noise is found by bisection so that the block density at ``tiles`` is
    near ``target``; below what the band and the global keys hold alone (noise 0) the
    least is returned, and the density moves in steps of whole tiles.  :func:`block_density`
    measures up to 4,096 positions: longer or larger inputs take :func:`banded` with the
    noise found on a smaller one.  ``width`` and ``global_keys``: the band's and the global
    keys', by default a local band of 16 positions and two global keys; :func:`fit` reads
    them off a capture."""
    if not 0.0 < target <= 1.0:
        raise ValueError(f"block density {target}: must lie in (0, 1]")
    low, high = 0.0, 8.0
    best = None
    for _ in range(steps):
        noise = (low + high) / 2
        q, k, v = banded(batch, heads, length, head_dim, width, global_keys=global_keys, noise=noise, seed=seed)
        density, _ = block_density(q, k, alpha, tiles, causal)
        if best is None or abs(density - target) < abs(best[3] - target):
            best = (q, k, v, density, noise)
        if density < target:
            low = noise
        else:
            high = noise
    return best
