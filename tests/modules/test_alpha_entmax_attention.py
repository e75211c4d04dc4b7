"""AlphaEntmaxAttention against fairseq's MultiheadAttention and against a direct computation."""

import pytest
import torch
from fairseq.modules import MultiheadAttention

from fairseq_sparse.entmax import entmax_alpha
from fairseq_sparse.modules import AlphaEntmaxAttention

E, H = 16, 4


def make(normalizer, stock=None, **kwargs):
    attn = AlphaEntmaxAttention(E, H, normalizer=normalizer, alpha_init=1.3, **kwargs)
    if stock is not None:
        attn.load_state_dict(stock.state_dict(), strict=False)
    return attn


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), 1)


def test_softmax_equals_fairseq_in_training_mode():
    """With softmax the module is fairseq's (which takes F.multi_head_attention_forward here)."""
    torch.manual_seed(0)
    stock = MultiheadAttention(E, H, self_attention=True)
    ours = make("softmax", stock, self_attention=True)
    x = torch.randn(7, 3, E)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    for kw in (dict(key_padding_mask=pad), dict(attn_mask=causal_mask(7)), dict(key_padding_mask=pad, attn_mask=causal_mask(7))):
        # (fairseq's fast path averages the weights over heads even when asked for
        # per-head weights, so heads are compared averaged.)
        want, want_w = stock(x, x, x, need_weights=True, **kw)
        got, got_w = ours(x, x, x, need_weights=True, **kw)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(got_w, want_w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("normalizer", ["sparsemax", "entmax15", "alpha_entmax"])
def test_training_path_uses_the_sparse_normalizer(normalizer):
    """The fast path would silently apply softmax: check against a direct computation."""
    torch.manual_seed(0)
    attn = make(normalizer, self_attention=True).train()
    x = torch.randn(6, 2, E) * 3
    out, w = attn(x, x, x, need_head_weights=True)
    q = attn.q_proj(x) * attn.scaling
    k = attn.k_proj(x)
    v = attn.v_proj(x)
    split = lambda t: t.view(6, 2, H, E // H).permute(1, 2, 0, 3)  # noqa: E731
    scores = split(q) @ split(k).transpose(-1, -2)
    alpha = {"sparsemax": 2.0, "entmax15": 1.5, "alpha_entmax": 1.3}[normalizer]
    probs = entmax_alpha(scores, torch.full((1, H, 1, 1), alpha))
    expected = attn.out_proj((probs @ split(v)).permute(2, 0, 1, 3).reshape(6, 2, E))
    torch.testing.assert_close(w.transpose(0, 1), probs, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    assert bool((w == 0).any()), "no exact zeros: not a sparse normaliser"


def test_alpha_gets_a_gradient_and_dropout_applies():
    torch.manual_seed(0)
    attn = make("alpha_entmax", self_attention=True, dropout=0.5).train()
    x = torch.randn(5, 2, E)
    out, _ = attn(x, x, x)
    out.pow(2).sum().backward()
    assert attn.head_alpha.pre_alpha.grad.abs().sum() > 0
    with torch.no_grad():
        a, _ = attn(x, x, x)
        attn.eval()
        b, _ = attn(x, x, x)
        c, _ = attn(x, x, x)
    assert not torch.allclose(a, b) and torch.equal(b, c)


@pytest.mark.parametrize("normalizer", ["softmax", "alpha_entmax"])
def test_incremental_decoding_matches_the_full_sequence(normalizer):
    """Decoder self-attention step by step (incremental state) == one causal pass."""
    torch.manual_seed(0)
    attn = make(normalizer, self_attention=True).eval()
    x = torch.randn(6, 2, E)
    full, _ = attn(x, x, x, attn_mask=causal_mask(6))
    state = {}
    steps = [attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps), full, atol=1e-5, rtol=1e-4)


def test_beam_reordering_of_incremental_state():
    torch.manual_seed(0)
    attn = make("alpha_entmax", self_attention=True).eval()
    x = torch.randn(3, 2, E)
    state = {}
    for t in range(2):
        attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state)
    order = torch.tensor([1, 0])
    attn.reorder_incremental_state(state, order)
    got, _ = attn(x[2:3, order], x[2:3, order], x[2:3, order], incremental_state=state)
    full, _ = attn(x[:, order], x[:, order], x[:, order], attn_mask=causal_mask(3))
    torch.testing.assert_close(got, full[2:3], atol=1e-5, rtol=1e-4)


def test_encoder_output_shared_across_the_beam():
    """With set_beam_size, one copy of the encoder output serves the whole beam."""
    torch.manual_seed(0)
    attn = make("alpha_entmax", encoder_decoder_attention=True).eval()
    beam, bsz, src = 3, 2, 5
    enc = torch.randn(src, bsz, E)
    pad = torch.zeros(bsz, src, dtype=torch.bool)
    pad[0, 4:] = True
    query = torch.randn(1, bsz * beam, E)
    enc_rep = enc.repeat_interleave(beam, dim=1)
    pad_rep = pad.repeat_interleave(beam, dim=0)
    want, _ = attn(query, enc_rep, enc_rep, key_padding_mask=pad_rep, incremental_state={}, static_kv=True)
    attn.set_beam_size(beam)
    got, _ = attn(query, enc_rep, enc_rep, key_padding_mask=pad_rep, incremental_state={}, static_kv=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_fully_masked_query_gives_zeros_not_nan():
    attn = make("sparsemax", self_attention=True).eval()
    x = torch.randn(4, 1, E)
    mask = torch.zeros(4, 4)
    mask[2] = float("-inf")
    out, w = attn(x, x, x, attn_mask=mask, need_head_weights=True)
    assert torch.isfinite(out).all() and bool((w[:, 0, 2] == 0).all())


def test_bad_normalizer_is_named():
    with pytest.raises(ValueError, match="normalizer"):
        AlphaEntmaxAttention(E, H, normalizer="softermax")


def test_sparsemax_keys_outside_padding():
    attn = make("sparsemax", self_attention=True).eval()
    x = torch.randn(5, 2, E)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[0, 3:] = True
    _, w = attn(x, x, x, key_padding_mask=pad, need_head_weights=True)
    assert bool((w[:, 0, :, 3:] == 0).all())
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
