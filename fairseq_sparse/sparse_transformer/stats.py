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
    return (keys_kept(p, allowed) / allowed.float().sum(-1).clamp_min(1)).sum(-1)


def support(p, allowed):
    """Per head: sum over queries of the number of keys with nonzero weight.

    Density is a share of the keys a query may attend to, so at the same support it falls
    as sentences grow; the support itself is what a head keeps, comparable across corpora of
    other lengths."""
    return keys_kept(p, allowed).sum(-1)


def keys_kept(p, allowed):
    """Per head and query: how many of the keys it may attend to get nonzero weight."""
    return ((p > 0) & allowed).float().sum(-1)


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


def token_mass(p, key_pieces):
    """Per key token type: {piece: (H,) weight the heads put on that piece, summed over
    queries and over the positions where it occurs}.  With the number of queries of the
    sentences in which a piece occurs, a head that attends to one token type (a question
    mark, the end of sentence) shows as one piece holding most of its mass."""
    columns = p.sum(1)  # (H, S)
    mass = {}
    for j, piece in enumerate(key_pieces):
        mass[piece] = mass[piece] + columns[:, j] if piece in mass else columns[:, j].clone()
    return mass


def pool_by_site(values, sites):
    """{site: the per-head values of all its layers} from ``values`` keyed by (site, layer), for
    each site of ``sites`` that has any, in ``sites``' order (tensors become floats)."""
    return {site: vals for site in sites
            if (vals := [float(x) for (s, _), v in values.items() if s == site for x in v])}


def bimodality(values, low=1.3, high=1.7):
    """(share of ``values`` below ``low``, share above ``high``, Sarle's bimodality
    coefficient) of a set of learned alphas; the coefficient

        b = (g^2 + 1) / (k + 3 (n - 1)^2 / ((n - 2) (n - 3)))

    (g the sample skewness, k the excess kurtosis) exceeds 5/9, its value for a uniform
    distribution, for bimodal or strongly skewed samples (Pfister et al., 2013).  NaN for
    fewer than 4 values or values that are all alike."""
    n = len(values)
    below = sum(v < low for v in values) / max(n, 1)
    above = sum(v > high for v in values) / max(n, 1)
    if n < 4:
        return below, above, math.nan
    mean = sum(values) / n
    m2 = sum((v - mean) ** 2 for v in values) / n
    if m2 == 0:
        return below, above, math.nan
    m3 = sum((v - mean) ** 3 for v in values) / n
    m4 = sum((v - mean) ** 4 for v in values) / n
    # Sample skewness and excess kurtosis with their small-sample corrections.
    g = math.sqrt(n * (n - 1)) / (n - 2) * m3 / m2 ** 1.5
    k = (n - 1) / ((n - 2) * (n - 3)) * ((n + 1) * (m4 / m2 ** 2 - 3) + 6)
    return below, above, (g ** 2 + 1) / (k + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


BIMODAL = 5 / 9


def first_moves(series, tol=1e-3):
    """How the heads' alphas set off and where they went, from ``series`` =
    {(site, layer): [(updates, alpha per head)]} starting at the initialisation:
    (denser first, sparser first, denser first and then sparser again, heads), a move
    smaller than ``tol`` counting as neither.  The paper finds most heads first become
    denser and some then turn sparse (Correia, Niculae & Martins, 2019)."""
    denser = sparser = turned = heads = 0
    for points in series.values():
        if len(points) < 2:
            continue
        for h in range(len(points[0][1])):
            path = [a[h] for _, a in points]
            heads += 1
            first = next((b - path[0] for b in path[1:] if abs(b - path[0]) >= tol), 0.0)
            denser += first < 0
            sparser += first > 0
            turned += first < 0 and path[-1] - min(path) >= tol
    return denser, sparser, turned, heads


def _ranks(values):
    """Rank of each value from 0, ties given the mean of the ranks they span."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def rank_correlation(x, y):
    """Spearman's rank correlation of two equally long sequences (Pearson's correlation of
    their ranks, ties ranked by their mean rank); NaN for fewer than 3 values or a sequence
    whose values are all alike.  Of the initial and learned alphas of a model's heads, 1
    says that training kept the heads in the order of their initialisation."""
    if len(x) != len(y):
        raise ValueError(f"rank_correlation of {len(x)} and {len(y)} values")
    n = len(x)
    if n < 3:
        return math.nan
    rx, ry = _ranks(list(x)), _ranks(list(y))
    mean = (n - 1) / 2
    cov = sum((a - mean) * (b - mean) for a, b in zip(rx, ry))
    vx, vy = sum((a - mean) ** 2 for a in rx), sum((b - mean) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx > 0 and vy > 0 else math.nan


def order_kept(initial, learned):
    """(pairs of heads of one layer whose learned alphas are in the order of their initial
    alphas, pairs of heads of one layer with distinct initial alphas), over
    {(site, layer): alpha per head} of each."""
    kept = pairs = 0
    for sl, start in initial.items():
        end = learned[sl]
        for a in range(len(start)):
            for b in range(a + 1, len(start)):
                if start[a] != start[b]:
                    pairs += 1
                    kept += (start[a] - start[b]) * (end[a] - end[b]) > 0
    return kept, pairs


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


# The report's sums over sentences, one dict per (site, layer), for fairseq and Hugging Face
# models alike.

# Token types found in fewer sentences are not a head's favourite: too few to say.
MIN_TOKEN_SENTENCES = 10
# The rows of an attention map: {whether the queries predict the next token: label}.
QUERY_LABELS = {False: "query (token at the position)", True: "query (token it predicts)"}


def add_sentence(a, p, kind, pieces, words=None):
    """Add one sentence's attention ``p`` (H, queries, keys) of a site of ``kind``
    (``encoder``, ``decoder`` self-attention or ``cross``) to its sums ``a``; ``pieces``
    label the keys, ``words`` (encoder) the word of each."""
    allowed = torch.ones(p.shape[1:], dtype=torch.bool)
    if kind == "decoder":
        allowed = torch.tril(allowed)
    a["queries"] += p.size(1)
    a["density"] = a["density"] + density(p, allowed)
    a["support"] = a["support"] + support(p, allowed)
    a["allowed"] += float(allowed.sum())
    a["diversity"] += float(head_diversity(p))
    if kind != "cross":
        a["previous"] = a["previous"] + previous_token_score(p)
        a["previous_queries"] += p.size(1) - 1
    tokens = a.setdefault("tokens", {})
    for piece, mass in token_mass(p, pieces).items():
        if piece in tokens:
            tokens[piece][0] += mass
            tokens[piece][1] += p.size(1)
            tokens[piece][2] += 1
        else:
            tokens[piece] = [mass, p.size(1), 1]
    if kind == "encoder":
        score, count = same_word_score(p, words)
        a["same_word"] = a["same_word"] + score
        a["same_word_queries"] += count


def per_head(acc, key, count_key="queries"):
    return {sl: (a[key] / max(a[count_key], 1)).tolist() for sl, a in acc.items() if count_key in a and a[count_key]}


def favourite_tokens(acc, min_sentences=MIN_TOKEN_SENTENCES):
    """{(site, layer): [(piece, share) per head]}: the key token type each head puts most
    weight on, as the share of the weight of the queries of the sentences holding it,
    among the pieces found in at least ``min_sentences`` sentences."""
    out = {}
    for sl, a in acc.items():
        frequent = [(piece, mass / queries) for piece, (mass, queries, sentences) in a.get("tokens", {}).items()
                    if sentences >= min_sentences]
        if not frequent:
            continue
        heads = len(frequent[0][1])
        out[sl] = [max(((piece, float(share[h])) for piece, share in frequent), key=lambda x: x[1])
                   for h in range(heads)]
    return out
