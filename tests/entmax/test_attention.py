"""The one attention entry point (fairseq_sparse.entmax.attend): its explicit path against
attention written out with the entmax package, and the masks it reads as the fused
kernels' (causal, key padding)."""

import entmax as oracle
import pytest
import torch

from fairseq_sparse.entmax import AttentionOptions, attend, get_normalizer
from fairseq_sparse.entmax.masks import read_mask, visible


def qkv(B=2, H=3, Tq=4, Tk=6, D=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for T in (Tq, Tk, Tk)]


def written_out(q, k, v, masked, normalize):
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    probs = normalize(scores.masked_fill(masked, float("-inf")))
    probs = torch.nan_to_num(probs)  # a row with no key: zeros
    return probs @ v, probs


@pytest.mark.parametrize("name, normalize", [
    ("entmax15", lambda s: oracle.entmax15(s, dim=-1)),
    ("sparsemax", lambda s: oracle.sparsemax(s, dim=-1)),
    ("softmax", lambda s: torch.softmax(s, -1)),
])
def test_explicit_path_with_each_kind_of_mask(name, normalize):
    q, k, v = qkv()
    padding = torch.tensor([[False] * 5 + [True], [False] * 6])
    window = torch.ones(4, 6, dtype=torch.bool).tril(2)  # bool: True attends
    additive = torch.zeros(2, 1, 4, 6, dtype=torch.float64).masked_fill(~window, torch.finfo(torch.float64).min)
    causal = ~visible(4, 6, "cpu")
    assert causal[0].tolist() == [False] * 3 + [True] * 3  # the last query is aligned with the last key
    causally = AttentionOptions(causal=True)
    for kwargs, masked in ((dict(options=causally), causal), (dict(key_padding_mask=padding), padding[:, None, None]),
                           (dict(mask=window), ~window), (dict(mask=additive), ~window),
                           (dict(options=causally, key_padding_mask=padding), causal | padding[:, None, None])):
        out, probs = attend(q, k, v, get_normalizer(name), need_weights=True, **kwargs)
        want_out, want_probs = written_out(q, k, v, masked, normalize)
        torch.testing.assert_close(probs.double(), want_probs, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(out, want_out, atol=1e-6, rtol=1e-5)
        if name != "softmax":
            assert not probs.masked_select(masked.expand_as(probs)).any(), "masked keys get exactly 0"


def test_learned_alphas_per_head_and_a_query_that_sees_no_key():
    q, k, v = qkv(H=3)
    alpha = torch.tensor([1.2, 1.5, 1.9], dtype=torch.float64)
    padding = torch.tensor([[True] * 6, [False] * 6])
    out, probs = attend(q, k, v, get_normalizer("alpha_entmax"), alpha=alpha, key_padding_mask=padding,
                        need_weights=True)
    scores = (q[1] @ k[1].transpose(-1, -2)) * 5 ** -0.5
    for h, a in enumerate(alpha.tolist()):
        torch.testing.assert_close(probs[1, h].double(), oracle.entmax_bisect(scores[h], a, dim=-1), atol=1e-5,
                                   rtol=1e-4)
    assert torch.equal(out[0], torch.zeros_like(out[0])), "a batch row of padding only gets zeros"
    with pytest.raises(ValueError, match="'alpha_entmax': learned, so it needs one alpha per head"):
        attend(q, k, v, get_normalizer("alpha_entmax"))


def test_masks_read_as_causal_and_padding_or_not():
    """transformers' additive 4-D masks: padding and/or causal are the fused kernels' own
    masks, and so is a sliding window where the caller names it (transformers passes
    ``sliding_window``), and so are packed sequences (one batch row whose sequences see only
    themselves, causal or not: read as cu_seqlens); another window, or a bias, is not."""
    B, T = 2, 5
    low = torch.finfo(torch.float32).min
    padding = torch.tensor([[False] * 5, [True, True, False, False, False]])  # left-padded
    allowed = visible(T, T, "cpu")[None] & ~padding[:, None, :]
    hf_mask = torch.zeros(B, 1, T, T).masked_fill(~allowed[:, None], low)
    causal, kpm, window, _ = read_mask(hf_mask, False, None, B, T, T)
    assert causal and torch.equal(kpm, padding) and window is None
    bidirectional = torch.zeros(B, 1, 1, T).masked_fill(padding[:, None, None], low)
    assert read_mask(bidirectional, False, None, B, T, T)[0] is False
    assert read_mask(torch.zeros(B, 1, T, T), False, None, B, T, T) == (False, None, None, None)
    in_window = allowed & torch.ones(T, T, dtype=torch.bool).triu(-1)  # each query and the key before it
    windowed = torch.zeros(B, 1, T, T).masked_fill(~in_window[:, None], low)
    assert read_mask(windowed, False, None, B, T, T) is None
    assert read_mask(windowed, False, None, B, T, T, window=3) is None
    causal, kpm, window, _ = read_mask(windowed, False, None, B, T, T, window=2)
    assert causal and torch.equal(kpm, padding) and window == 2
    causal, kpm, window, _ = read_mask(hf_mask, False, None, B, T, T, window=T)  # a window over every key
    assert causal and torch.equal(kpm, padding) and window == T
    assert read_mask(torch.randn(B, 1, T, T), False, None, B, T, T) is None  # a bias
    assert read_mask(None, True, padding, B, T, T) == (True, padding, None, None)
    assert read_mask(None, True, padding, B, T, T, window=2) == (True, padding, 2, None)
    segments = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])
    same = segments[:, None] == segments[None, :]
    for causal in (False, True):
        allowed = same & visible(8, 8, "cpu") if causal else same
        packed = torch.zeros(1, 1, 8, 8).masked_fill(~allowed, low)
        got = read_mask(packed, False, None, 1, 8, 8)
        assert got[:3] == (causal, None, None) and got[3].tolist() == [0, 3, 5, 8], got
        assert read_mask(packed.expand(2, 1, 8, 8), False, None, 2, 8, 8) is None  # packing is one batch row
    holed = allowed.clone()
    holed[6, 5] = False
    assert read_mask(torch.zeros(1, 1, 8, 8).masked_fill(~holed, low), False, None, 1, 8, 8) is None


def test_bad_arguments_are_refused_alike_on_every_path_and_numbers_of_any_library_are_taken():
    """Dropout outside [0, 1) (NaN included), a window of no keys or without causal, no
    key/value heads: refused by the entry point on either path, never run; numpy and torch
    numbers are taken wherever Python ones are, and packed offsets as a list."""
    import numpy as np

    from fairseq_sparse.entmax import AlphaFloor

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    entmax15 = get_normalizer("entmax15")
    paths = {"fused": lambda **kw: attend(q, k, v, entmax15, options=AttentionOptions(**kw)),
             "explicit": lambda **kw: attend(q, k, v, entmax15, options=AttentionOptions(fused=False, **kw))}
    for bad, message in ((dict(dropout=-0.1), r"dropout must lie in \[0, 1\), got -0.1"),
                         (dict(dropout=float("nan")), r"dropout must lie in \[0, 1\), got nan"),
                         (dict(dropout=1.0), r"dropout must lie in \[0, 1\)"),
                         (dict(window=0, causal=True), "window must be a positive number of keys, got 0"),
                         (dict(window=-1, causal=True), "window must be a positive number of keys, got -1"),
                         (dict(window=2), "give causal=True with window")):
        for name, path in paths.items():
            with pytest.raises(ValueError, match=message):
                path(**bad)
    with pytest.raises(ValueError, match="H_kv dividing H=2"):
        attend(q, k[:, :0], v[:, :0], entmax15)
    want = attend(q, k, v, entmax15, options=AttentionOptions(causal=True, window=3, fused=False))[0]
    for window in (np.int64(3), torch.tensor(3)):
        torch.testing.assert_close(attend(q, k, v, entmax15, options=AttentionOptions(causal=True, window=window))[0],
                                   want)
    packed = attend(q, k, v, entmax15, options=AttentionOptions(causal=True, cu_seqlens=torch.tensor([0, 2, 6]),
                                                                fused=False))[0]
    torch.testing.assert_close(attend(q, k, v, entmax15, options=AttentionOptions(causal=True,
                                                                                  cu_seqlens=[0, 2, 6]))[0], packed)
    assert AlphaFloor(np.float32(1.5), np.int64(10)) == AlphaFloor(torch.tensor(1.5), torch.tensor(10)) \
        == AlphaFloor(1.5, 10)
    with pytest.raises(ValueError, match="--alpha-floor-updates"):
        AlphaFloor(1.5, 2.5)


def test_the_keys_a_query_sees_are_counted_from_every_mask():
    from fairseq_sparse.entmax.masks import keys_seen

    assert keys_seen(5, 7, "cpu", causal=True).tolist() == [[3, 4, 5, 6, 7]]  # cached keys: aligned at the end
    left = torch.tensor([[True, True, False, False, False]])  # left padding: counted from the first real key
    assert keys_seen(5, 5, "cpu", causal=True, key_padding_mask=left).tolist() == [[1, 1, 1, 2, 3]]
    assert keys_seen(3, 3, "cpu", key_padding_mask=torch.tensor([[False, False, True]])).tolist() == [[2, 2, 2]]
    assert keys_seen(6, 6, "cpu", causal=True, window=2).tolist() == [[1, 2, 2, 2, 2, 2]]
    assert keys_seen(6, 6, "cpu", causal=True, cu_seqlens=[0, 2, 6]).tolist() == [[1, 2, 1, 2, 3, 4]]
    assert keys_seen(6, 6, "cpu", cu_seqlens=[0, 2, 6]).tolist() == [[2, 2, 4, 4, 4, 4]]


@pytest.mark.parametrize("name", ["softmax", "entmax15", "alpha_entmax"])
def test_a_length_scale_multiplies_each_query_by_the_factor_of_the_keys_it_sees(name):
    """AttentionOptions(length_scale=f): the queries times f(n), n counted from the masks, on the explicit
    path (an additive mask included) and, under Triton's interpreter, on the fused one."""
    from fairseq_sparse.entmax import has_triton_kernel, use_backend
    from fairseq_sparse.entmax.kernels import INTERPRET

    q, k, v = qkv(Tq=6, Tk=6)
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    normalizer = get_normalizer(name)
    alpha = torch.tensor([1.2, 1.5, 1.8], dtype=torch.float64) if normalizer.learned else None
    seen_by = {}

    def scale(seen):
        seen_by["n"] = seen
        return (1.0 + 0.3 * seen.double())[:, None, :, None]

    causal, scaled = AttentionOptions(causal=True), AttentionOptions(causal=True, length_scale=scale)
    out, _ = attend(q, k, v, normalizer, alpha=alpha, options=scaled, key_padding_mask=padding)
    n = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 4, 4]])
    assert seen_by["n"].tolist() == n.tolist()
    factor = (1.0 + 0.3 * n.double())[:, None, :, None]
    want, _ = attend(q * factor, k, v, normalizer, alpha=alpha, options=causal, key_padding_mask=padding)
    torch.testing.assert_close(out, want)
    additive = torch.zeros(2, 1, 6, 6, dtype=torch.float64).masked_fill(
        ~visible(6, 6, "cpu") | padding[:, None, None], torch.finfo(torch.float64).min)
    got, _ = attend(q, k, v, normalizer, alpha=alpha, mask=additive, options=AttentionOptions(length_scale=scale))
    assert seen_by["n"].tolist() == n.tolist()
    torch.testing.assert_close(got[0], want[0])
    if has_triton_kernel() and INTERPRET and normalizer.sparse:
        with use_backend("triton"):
            fused, _ = attend(q.float(), k.float(), v.float(), normalizer, alpha=alpha if alpha is None else
                              alpha.float(), options=scaled, key_padding_mask=padding)
        assert seen_by["n"].tolist() == n.tolist()
        torch.testing.assert_close(fused[0].double(), want[0], atol=1e-5, rtol=1e-5)
