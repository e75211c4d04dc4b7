"""AlphaEntmaxAttention's fused path (the Triton kernels; SDPA for softmax) against
its explicit path, module against module with the same weights: outputs and gradients
(inputs, projections, each head's alpha) in encoder self-attention with padding, causal
decoder self-attention, cross-attention, incremental decoding and the beam-shared
encoder output.  On CPU the kernel runs under Triton's interpreter, when asked with
use_backend("triton")."""

import pytest
import torch

from fairseq_sparse.entmax import attention, has_triton_kernel, use_backend
from fairseq_sparse.modules import AlphaEntmaxAttention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(not (has_triton_kernel() and (DEVICE == "cuda" or attention.kernels.INTERPRET)),
                                reason="needs Triton, and CUDA or TRITON_INTERPRET=1")
E, H = 32, 4
NORMALIZERS = ["softmax", "sparsemax", "entmax15", "alpha_entmax"]


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf"), device=DEVICE), 1)


def module(normalizer, seed=0, **kwargs):
    torch.manual_seed(seed)
    return AlphaEntmaxAttention(E, H, normalizer=normalizer, alpha_init="random", **kwargs).to(DEVICE)


@pytest.fixture
def fused_calls(monkeypatch):
    """How many times the fused kernels ran."""
    calls = {"entmax": 0}
    real = attention._fused_entmax

    def counted(*args, **kwargs):
        calls["entmax"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(attention, "_fused_entmax", counted)
    return calls


def run_both(attn, inputs, **kwargs):
    """(output, gradients) of the explicit and of the fused path; ``inputs`` is [x] for
    self-attention or [query, key, value]."""
    results = []
    # The explicit path is switched on by hand: on CUDA "auto" would take the kernel too.
    for fused, backend in ((False, "auto"), (True, "triton")):
        attn.zero_grad()
        attn.use_fused_kernel = fused
        leaves = [x.detach().clone().requires_grad_() for x in inputs]
        with use_backend(backend):
            args = leaves if len(leaves) == 3 else leaves * 3  # self-attention: query = key = value
            out, weights = attn(*args, need_weights=False, **kwargs)
        assert weights is None
        out.pow(2).sum().backward()
        grads = [x.grad for x in leaves] + [p.grad.clone() for p in attn.parameters()]
        results.append((out.detach(), grads))
    return results


def assert_same(explicit, fused):
    torch.testing.assert_close(fused[0], explicit[0], atol=2e-5, rtol=2e-4)
    for got, want in zip(fused[1], explicit[1]):
        if want is not None:
            # Absolute error relative to the gradient's scale: a weight's gradient sums many
            # terms of the size of its largest entries (up to ~20 here), and the two paths sum
            # them in different orders (on an H100 one entry of 1,024 of a causal alpha-entmax
            # weight gradient differed by 1.3e-4, 6e-6 of the largest).
            scale = max(1.0, want.abs().max().item())
            torch.testing.assert_close(got, want, atol=5e-5 * scale, rtol=5e-4)


@pytest.mark.parametrize("normalizer", NORMALIZERS)
def test_encoder_self_attention_with_padding(normalizer, fused_calls):
    attn = module(normalizer, self_attention=True).train()
    x = torch.randn(9, 3, E, device=DEVICE) * 2
    pad = torch.zeros(3, 9, dtype=torch.bool, device=DEVICE)
    pad[1, 6:] = True
    explicit, fused = run_both(attn, [x], key_padding_mask=pad)
    assert_same(explicit, fused)
    assert fused_calls["entmax"] == (normalizer != "softmax")
    if normalizer == "alpha_entmax":
        assert explicit[1][-1].abs().sum() > 0, "alpha got no gradient"


@pytest.mark.parametrize("normalizer", NORMALIZERS)
def test_decoder_self_attention_is_causal(normalizer, fused_calls):
    attn = module(normalizer, self_attention=True, causal_attn_mask=True).train()
    x = torch.randn(7, 2, E, device=DEVICE) * 2
    explicit, fused = run_both(attn, [x], attn_mask=causal_mask(7))
    assert_same(explicit, fused)
    assert fused_calls["entmax"] == (normalizer != "softmax")


@pytest.mark.parametrize("normalizer", ["softmax", "alpha_entmax"])
def test_cross_attention(normalizer):
    attn = module(normalizer, encoder_decoder_attention=True, kdim=E, vdim=E).train()
    x = torch.randn(5, 2, E, device=DEVICE) * 2
    enc = torch.randn(11, 2, E, device=DEVICE) * 2
    pad = torch.zeros(2, 11, dtype=torch.bool, device=DEVICE)
    pad[0, 8:] = True
    explicit, fused = run_both(attn, [x, enc, enc], key_padding_mask=pad)
    assert_same(explicit, fused)


@pytest.mark.parametrize("normalizer", ["softmax", "alpha_entmax"])
def test_attention_with_its_own_values(normalizer):
    """Neither self- nor encoder-decoder attention: values projected from ``value``."""
    attn = module(normalizer).train()
    x = torch.randn(4, 2, E, device=DEVICE) * 2
    key, value = torch.randn(6, 2, E, device=DEVICE) * 2, torch.randn(6, 2, E, device=DEVICE)
    explicit, fused = run_both(attn, [x, key, value])
    assert_same(explicit, fused)


@pytest.mark.parametrize("normalizer", ["softmax", "entmax15", "alpha_entmax"])
def test_incremental_decoding(normalizer, fused_calls):
    """Self-attention and cross-attention step by step on the fused path == one explicit
    causal pass, with the encoder output shared by a beam of 2."""
    self_attn = module(normalizer, self_attention=True, causal_attn_mask=True).eval()
    cross = module(normalizer, seed=1, encoder_decoder_attention=True).eval()
    beam, bsz = 2, 2
    x = torch.randn(5, bsz * beam, E, device=DEVICE)
    enc = torch.randn(6, bsz, E, device=DEVICE).repeat_interleave(beam, dim=1)
    pad = torch.zeros(bsz, 6, dtype=torch.bool, device=DEVICE)
    pad[1, 4:] = True
    pad = pad.repeat_interleave(beam, dim=0)
    with torch.no_grad():
        self_attn.use_fused_kernel = cross.use_fused_kernel = False
        h, _ = self_attn(x, x, x, attn_mask=causal_mask(5), need_weights=False)
        want, _ = cross(h, enc, enc, key_padding_mask=pad, need_weights=False)
        self_attn.use_fused_kernel = cross.use_fused_kernel = True
        cross.set_beam_size(beam)
        state, steps = {}, []
        with use_backend("triton"):
            for t in range(5):
                h_t, _ = self_attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state, need_weights=False)
                out, _ = cross(h_t, enc, enc, key_padding_mask=pad, incremental_state=state, static_kv=True,
                               need_weights=False)
                steps.append(out)
    torch.testing.assert_close(torch.cat(steps), want, atol=2e-5, rtol=2e-4)
    assert fused_calls["entmax"] == (10 if normalizer != "softmax" else 0)


def test_explicit_path_where_the_kernel_does_not_apply(fused_calls):
    """Attention weights asked for, or a mask that is neither the future mask nor padding (a
    window): the explicit path.  Attention dropout while training stays on the fused path
    (the kernels drop the weights themselves).  The future mask of a module not marked
    causal_attn_mask is read as what it is."""
    x = torch.randn(6, 2, E, device=DEVICE)
    window = causal_mask(6) + torch.tril(torch.full((6, 6), float("-inf"), device=DEVICE), -3)
    with use_backend("triton"):
        attn = module("alpha_entmax", self_attention=True).train()
        attn(x, x, x, need_weights=True)
        attn(x, x, x, attn_mask=window, need_weights=False)
        assert fused_calls["entmax"] == 0
        module("alpha_entmax", self_attention=True, dropout=0.1).train()(x, x, x, need_weights=False)
        assert fused_calls["entmax"] == 1
        module("alpha_entmax", self_attention=True, dropout=0.1).eval()(x, x, x, need_weights=False)
        assert fused_calls["entmax"] == 2
        attn(x, x, x, attn_mask=causal_mask(6), need_weights=False)  # not marked causal_attn_mask
        assert fused_calls["entmax"] == 3
