import math

import torch

from fairseq_sparse.attention import stats


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
