import math

import pytest
import torch

from fairseq_sparse.sparse_transformer import stats


def test_density_is_one_for_softmax_and_counts_allowed_keys():
    p = torch.softmax(torch.randn(2, 4, 4), -1)
    allowed = torch.ones(4, 4, dtype=torch.bool)
    torch.testing.assert_close(stats.density(p, allowed), torch.full((2,), 4.0))
    causal = torch.tril(allowed)
    one_hot = torch.eye(4).expand(2, 4, 4)  # each query attends to itself only
    torch.testing.assert_close(stats.density(one_hot, causal), torch.full((2,), 1 + 1 / 2 + 1 / 3 + 1 / 4))


def test_head_diversity_bounds():
    same = torch.softmax(torch.randn(1, 5, 7), -1).expand(4, 5, 7)
    assert abs(float(stats.head_diversity(same))) < 1e-6
    disjoint = torch.zeros(4, 5, 7)
    for h in range(4):
        disjoint[h, :, h] = 1.0
    assert math.isclose(float(stats.head_diversity(disjoint)) / 5, math.log(4), rel_tol=1e-6)


def test_previous_token_and_same_word_scores():
    p = torch.zeros(2, 4, 4)
    p[0, torch.arange(1, 4), torch.arange(0, 3)] = 1.0  # head 0 looks back one token
    p[0, 0, 0] = 1.0
    p[1] = torch.eye(4)
    torch.testing.assert_close(stats.previous_token_score(p), torch.tensor([3.0, 0.0]))
    words = stats.word_ids_from_pieces(["\u2581new", "\u2581york", "er", "s"])
    assert words.tolist() == [0, 1, 1, 1]
    assert stats.word_ids_from_pieces(["new", "york@@", "er@@", "s"]).tolist() == [0, 1, 1, 1]
    # BERT's WordPiece: '##' continues a word; a special symbol is a word of its own and the
    # piece after it starts one, so words never run across [CLS] src [SEP] mt [SEP].
    pieces = ["[CLS]", "new", "york", "##er", "##s", "[SEP]", "##s", "new", "[SEP]"]
    assert stats.word_ids_from_pieces(pieces, {"[CLS]", "[SEP]"}).tolist() == [0, 1, 2, 2, 2, 3, 4, 5, 6]
    assert stats.word_ids_from_pieces(["\u2581york", "er", "</s>"], {"</s>"}).tolist() == [0, 0, 1]
    assert stats.word_ids_from_pieces(["york@@", "</s>"], {"</s>"}).tolist() == [0, 1]
    merge = torch.zeros(1, 4, 4)
    merge[0, 1, 2] = merge[0, 2, 3] = merge[0, 3, 1] = 1.0
    merge[0, 0, 0] = 1.0
    score, count = stats.same_word_score(merge, words)
    assert count == 3 and score.tolist() == [3.0]


def test_token_mass_sums_each_token_type_over_its_positions():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(3, 5, 4), -1)
    pieces = ["a", "?", "a", "</s>"]
    mass = stats.token_mass(p, pieces)
    assert sorted(mass) == ["</s>", "?", "a"]
    torch.testing.assert_close(mass["a"], p[:, :, 0].sum(1) + p[:, :, 2].sum(1))
    torch.testing.assert_close(mass["?"], p[:, :, 1].sum(1))
    torch.testing.assert_close(sum(mass.values()), torch.full((3,), 5.0))


def test_bimodality_matches_scipy_and_separates_two_modes():
    scipy_stats = pytest.importorskip("scipy.stats")
    values = [1.05, 1.1, 1.12, 1.15, 1.2, 1.08, 1.8, 1.85, 1.9, 1.95, 1.88, 1.92]
    below, above, coefficient = stats.bimodality(values)
    assert (below, above) == (0.5, 0.5)
    g, k, n = scipy_stats.skew(values, bias=False), scipy_stats.kurtosis(values, bias=False), len(values)
    assert coefficient == pytest.approx((g ** 2 + 1) / (k + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3))))
    assert coefficient > stats.BIMODAL
    one_mode = [1.5 + 0.01 * x for x in (-3, -2, -1, -1, 0, 0, 0, 1, 1, 2, 3)]
    assert stats.bimodality(one_mode)[2] < stats.BIMODAL
    assert math.isnan(stats.bimodality([1.2, 1.3, 1.4])[2]) and math.isnan(stats.bimodality([1.5] * 5)[2])


def test_first_moves_count_denser_sparser_and_turned_heads():
    series = {("encoder", 0): [(0, [1.5, 1.5, 1.5, 1.5]), (100, [1.4, 1.6, 1.5, 1.5]), (200, [1.45, 1.7, 1.5, 1.3]),
                               (300, [1.5, 1.7, 1.5, 1.2])],
              ("decoder", 0): [(0, [1.2, 1.9])]}  # one point: no move to count
    # h0 denser then sparser again; h1 sparser; h2 never moved; h3 first moved at 200, denser.
    assert stats.first_moves(series) == (2, 1, 1, 4)


def test_rank_correlation_matches_scipy_with_ties():
    scipy_stats = pytest.importorskip("scipy.stats")
    x = [1.9, 1.2, 1.5, 1.5, 1.05, 1.7, 1.3]
    y = [1.8, 1.1, 1.3, 1.6, 1.05, 1.6, 1.25]
    assert stats.rank_correlation(x, y) == pytest.approx(scipy_stats.spearmanr(x, y).statistic)
    assert stats.rank_correlation(x, [-v for v in x]) == pytest.approx(-1.0)
    assert math.isnan(stats.rank_correlation([1.5] * 4, y[:4])) and math.isnan(stats.rank_correlation(x[:2], y[:2]))
    with pytest.raises(ValueError, match="3 and 2 values"):
        stats.rank_correlation(x[:3], y[:2])


def test_order_kept_counts_pairs_within_a_layer():
    initial = {("encoder", 0): [1.2, 1.5, 1.8], ("decoder", 0): [1.5, 1.5]}
    learned = {("encoder", 0): [1.1, 1.05, 1.7], ("decoder", 0): [1.4, 1.2]}
    # encoder: (h0, h1) swapped, (h0, h2) and (h1, h2) kept; decoder: equal starts, no order to keep.
    assert stats.order_kept(initial, learned) == (2, 3)
