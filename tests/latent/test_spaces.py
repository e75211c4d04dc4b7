"""Latent spaces: k-best bit-vectors and the budgeted MAP against enumeration; sampling
and log-probabilities of the mean-field distributions."""

import itertools

import pytest
import torch

from fairseq_sparse.latent import BitVector, Categorical


def all_bitvectors(d):
    return torch.tensor(list(itertools.product([0.0, 1.0], repeat=d)), dtype=torch.float64)


@pytest.mark.parametrize("d,k", [(3, 8), (5, 7), (6, 20)])
def test_kbest_bitvectors_are_the_best_by_enumeration(d, k):
    torch.manual_seed(d)
    scores = torch.randn(6, d, dtype=torch.float64)
    best = BitVector(d).kbest(scores, k)
    every = all_bitvectors(d)
    for row in range(len(scores)):
        got = best[row] @ scores[row]
        want = (every @ scores[row]).sort(descending=True).values[:k]
        torch.testing.assert_close(got, want)  # same scores, best first
        assert len({tuple(z.tolist()) for z in best[row]}) == min(k, 2 ** d)  # distinct structures


def test_budgeted_map_by_enumeration():
    torch.manual_seed(0)
    every = all_bitvectors(6)
    for budget in (1, 3, 6):
        space = BitVector(6, budget)
        feasible = every[every.sum(1) <= budget]
        scores = torch.randn(20, 6, dtype=torch.float64)
        torch.testing.assert_close((space.map(scores) * scores).sum(1), (scores @ feasible.T).amax(1))
    with pytest.raises(ValueError, match="budget of 7 ones does not fit 6 bits"):
        BitVector(6, 7)


@pytest.mark.parametrize("space", [Categorical(5), BitVector(5)])
def test_samples_follow_log_prob(space):
    """The empirical frequency of each structure matches exp(log_prob)."""
    torch.manual_seed(1)
    scores = torch.randn(1, 5, dtype=torch.float64).expand(20000, 5)
    z = space.sample(scores)
    counts = {}
    for row in z.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    top = max(counts, key=counts.get)
    p = space.log_prob(scores[:1], torch.tensor([top], dtype=torch.float64)).exp().item()
    assert abs(counts[top] / 20000 - p) < 5 * (p * (1 - p) / 20000) ** 0.5
    # Entropy against its definition by enumeration.
    support = torch.eye(5, dtype=torch.float64) if isinstance(space, Categorical) else all_bitvectors(5)
    logp = space.log_prob(scores[:1].expand(len(support), 5), support)
    torch.testing.assert_close(logp.exp().sum(), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(space.entropy(scores[:1])[0], -(logp.exp() * logp).sum())
