"""Statistics of attention distributions, per head (Correia, Niculae & Martins, EMNLP 2019, Sec. 5).

Every function takes attention probabilities ``p`` of shape (H, T, S) for one
sentence (heads, queries, keys), padding already removed, and returns one value
per head (or per layer) summed over queries, so that callers average over a
corpus by dividing by the number of queries.
"""

import math

import torch

from ..modules.probability import jensen_shannon


def density(p, allowed):
    """Per head: sum over queries of the fraction of the keys a query may attend to
    (``allowed`` (T, S): not padding, not in the future) that get nonzero weight;
    softmax gives 1 for every query."""
    nonzero = ((p > 0) & allowed).float().sum(-1)
    return (nonzero / allowed.float().sum(-1).clamp_min(1)).sum(-1)


def head_diversity(p):
    """Generalised Jensen-Shannon divergence between the heads of a layer, per query, summed:

        JS(p_1, ..., p_H) = H_Shannon(mean_h p_h) - mean_h H_Shannon(p_h)

    0 when all heads attend alike, log H when their supports are disjoint.
    """
    return jensen_shannon(p, dim=0).sum()


def previous_token_score(p):
    """Per head: sum over queries i >= 1 of the weight on key i - 1 (self-attention)."""
    t = min(p.size(1), p.size(2))
    idx = torch.arange(1, t)
    return p[:, idx, idx - 1].sum(-1)


def same_word_score(p, word_ids):
    """Per head: sum over queries that are part of a multi-piece word of the weight
    on the *other* pieces of the same word (subword-merging heads).  ``word_ids``
    (T,) gives the word index of each subword token.  Returns (scores, count)."""
    same = word_ids.unsqueeze(0) == word_ids.unsqueeze(1)
    same.fill_diagonal_(False)
    rows = same.any(-1)
    if not bool(rows.any()):
        return torch.zeros(p.size(0)), 0
    return (p[:, rows] * same[rows].float()).sum(-1).sum(-1), int(rows.sum())


def word_ids_from_pieces(pieces, specials=()):
    """Word index of each subword piece: sentencepiece ('\u2581' starts a word),
    BERT's WordPiece ('##' continues a word) or subword-nmt ('@@' ends a non-final
    piece).  Each of ``specials`` (e.g. ``</s>``, ``[CLS]``, ``[SEP]``) is a word of
    its own."""
    sentencepiece = any(piece.startswith("\u2581") for piece in pieces)
    wordpiece = not sentencepiece and any(piece.startswith("##") and len(piece) > 2 for piece in pieces)
    ids, word, after_special, continues = [], -1, True, False
    for piece in pieces:
        special = piece in specials
        if special:
            starts, continues = True, False
        elif sentencepiece:
            starts = piece.startswith("\u2581")
        elif wordpiece:
            starts = not piece.startswith("##")
        else:
            starts, continues = not continues, piece.endswith("@@")
        word += starts or after_special
        after_special = special
        ids.append(word)
    return torch.tensor(ids)


def max_head_diversity(num_heads):
    return math.log(num_heads)
