"""The normaliser registry: what each name means, errors naming the option, and that a new
normaliser is one registry entry away from every attention site and output layer."""

import math
import re

import pytest
import torch

from fairseq_sparse.entmax import NORMALIZERS, entmax15, entmax_alpha, get_normalizer, register_normalizer, sparsemax
from fairseq_sparse.entmax.normalizers import fixed_alpha_normalizer, normalizer_names


def test_the_registered_normalizers():
    assert normalizer_names() == ("softmax", "sparsemax", "entmax15", "alpha_entmax")
    assert normalizer_names(fixed_alpha=True) == ("softmax", "sparsemax", "entmax15")
    assert [(n.alpha, n.sparse, n.learned) for n in NORMALIZERS.values()] == [
        (1.0, False, False), (2.0, True, False), (1.5, True, False), (None, True, True)]
    assert fixed_alpha_normalizer(2) is NORMALIZERS["sparsemax"] and fixed_alpha_normalizer(1.5) is NORMALIZERS["entmax15"]


def test_each_normalizer_computes_its_function():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 9)
    torch.testing.assert_close(get_normalizer("softmax")(x, dim=1), torch.softmax(x, 1))
    torch.testing.assert_close(get_normalizer("sparsemax")(x, dim=1), sparsemax(x, 1))
    torch.testing.assert_close(get_normalizer("entmax15")(x), entmax15(x))
    alpha = torch.tensor([1.2, 1.5, 1.9])[:, None, None]
    torch.testing.assert_close(get_normalizer("alpha_entmax")(x, alpha=alpha), entmax_alpha(x, alpha))
    with pytest.raises(ValueError, match="needs an alpha"):
        get_normalizer("alpha_entmax")(x)


def test_log_probabilities_are_minus_infinity_off_the_support():
    x = torch.tensor([[2.0, 1.9, -3.0]])
    torch.testing.assert_close(get_normalizer("softmax").log_probs(x), torch.log_softmax(x, -1))
    log_p = get_normalizer("sparsemax").log_probs(x)
    assert log_p[0, 2] == -math.inf and torch.isfinite(log_p[0, :2]).all()
    with pytest.raises(ValueError, match="fixed alpha"):
        get_normalizer("alpha_entmax").log_probs(x)


def test_unknown_or_learned_where_fixed_is_needed_names_the_option_and_the_choices():
    with pytest.raises(ValueError, match=re.escape("--cross-attention-normalizer: unknown normaliser 'soft'; "
                                                   "choose one of softmax, sparsemax, entmax15, alpha_entmax")):
        get_normalizer("soft", "--cross-attention-normalizer")
    with pytest.raises(ValueError, match=re.escape("--output-normalizer: unknown normaliser 'alpha_entmax'; "
                                                   "choose one of softmax, sparsemax, entmax15")):
        get_normalizer("alpha_entmax", "--output-normalizer", fixed_alpha=True)
    with pytest.raises(ValueError, match="no sparse normaliser has alpha 1.25"):
        fixed_alpha_normalizer(1.25)


@pytest.fixture
def entmax_125():
    """A normaliser added as the docs say: one registry entry."""
    def function(x, dim=-1):
        return entmax_alpha(x, 1.25, dim=dim)

    yield register_normalizer("entmax125", 1.25, function, sparse=True)
    del NORMALIZERS["entmax125"]


def test_a_new_normalizer_is_one_entry_away_from_the_attention_and_the_loss(entmax_125):
    from fairseq_sparse.entmax.losses import entmax_loss
    from fairseq_sparse.modules import AlphaEntmaxAttention

    torch.manual_seed(0)
    attention = AlphaEntmaxAttention(16, 4, self_attention=True, normalizer="entmax125").eval()
    assert attention.normalizer is entmax_125 and attention.head_alpha is None
    torch.testing.assert_close(attention.alpha(), torch.full((4,), 1.25))
    x = torch.randn(5, 2, 16)
    _, weights = attention(x, x, x, need_head_weights=True)
    scores, _ = attention(x, x, x, before_softmax=True)
    torch.testing.assert_close(weights.transpose(0, 1).reshape(8, 5, 5), entmax_alpha(scores, 1.25))
    z, target = torch.randn(6, 11), torch.randint(0, 11, (6,))
    assert (entmax_loss(z, target, 1.25) >= 0).all()
