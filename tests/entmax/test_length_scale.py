"""LengthScale against its formulas computed directly (float64, element by element), and its
two starts: within ADAPTIVE_BETA_START of 1 at every length, and ASEntmax's own."""

import math

import pytest
import torch

from fairseq_sparse.entmax.length_scale import ADAPTIVE_BETA_START, LengthScale


@torch.no_grad()
def direct(scale, seen, x):
    """The factor of every (batch, head, query) from the parameters, one number at a time."""
    B, T = seen.shape[0], seen.shape[1]
    out = torch.ones(B, scale.heads, T, 1, dtype=torch.float64)
    for row, head in enumerate(scale.scaled_heads):
        for b in range(B):
            for t in range(T):
                log_n = math.log(float(seen[b, t]) + 1)
                if scale.form == "log":
                    out[b, head, t, 0] = float(scale.weight[row]) * log_n
                    continue
                z_b = float(scale.beta.weight[row].double() @ x[b, t].double() + scale.beta.bias[row])
                z_g = float(scale.gamma.weight[row].double() @ x[b, t].double() + scale.gamma.bias[row])
                beta, gamma = math.log1p(math.exp(z_b)), 2 * math.tanh(z_g)
                out[b, head, t, 0] = 1 + beta * log_n ** gamma
    return out


@pytest.mark.parametrize("form", ["log", "adaptive", "adaptive_paper"])
@pytest.mark.parametrize("scaled", [None, [False, True, False, True]])
def test_the_factor_is_the_formula(form, scaled):
    torch.manual_seed(0)
    scale = LengthScale(form, 4, embed_dim=6, scaled=scaled)
    for parameter in scale.parameters():  # away from either start
        torch.nn.init.normal_(parameter, std=0.7)
    seen = torch.tensor([[1, 2, 3, 9, 40], [5, 6, 7, 8, 1000]])
    x = torch.randn(2, 5, 6)
    got = scale(seen, x)
    assert got.shape == (2, 4, 5, 1) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), direct(scale, seen, x), rtol=1e-5, atol=1e-6)
    if scaled is not None:
        assert (got[:, [0, 2]] == 1).all()


def test_the_identity_start_is_within_its_bound_of_one_at_every_length():
    scale = LengthScale("adaptive", 4, embed_dim=6)
    seen = torch.tensor([[1, 10, 100, 10_000, 1_000_000]])
    factor = scale(seen, torch.randn(1, 5, 6) * 10)
    assert ((factor - 1).abs() <= ADAPTIVE_BETA_START * 1.0001).all() and (factor > 1).all()


def test_the_papers_start_depends_on_the_length_and_the_token():
    """ASEntmax's code: both projections at nn.Linear's default, no bias: beta starts near
    softplus(0) and gamma differs by token, so the factor changes with n from the start."""
    torch.manual_seed(0)
    scale = LengthScale("adaptive_paper", 4, embed_dim=64)
    bound = 1 / math.sqrt(64)
    for layer in (scale.beta, scale.gamma):
        assert (layer.bias == 0).all() and layer.weight.abs().max() <= bound and layer.weight.std() > bound / 3
    x = torch.nn.functional.layer_norm(torch.randn(1, 3, 64), (64,))
    short, long = scale(torch.tensor([[16, 16, 16]]), x), scale(torch.tensor([[512, 512, 512]]), x)
    assert not torch.allclose(short, long, atol=1e-2)
    assert short[0, :, 0].std() > 0 and not torch.allclose(short[0, :, 0], short[0, :, 1])
    beta = torch.nn.functional.softplus(scale.beta(x))
    assert ((beta - math.log(2)).abs() < 0.5).all()


def test_an_unknown_form_or_a_missing_input_is_named():
    with pytest.raises(ValueError, match="'cubic'"):
        LengthScale("cubic", 2, 4)
    with pytest.raises(ValueError, match="give embed_dim"):
        LengthScale("adaptive_paper", 2)
    with pytest.raises(ValueError, match="needs the layer input"):
        LengthScale("adaptive_paper", 2, 4)(torch.ones(1, 3))
