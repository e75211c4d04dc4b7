"""The latent spaces an estimator can work in, each with its mean-field distribution.

An estimator asks its space how to draw z, how likely z is, how to relax it and
which structures score best; it never needs to know what z looks like.

- :class:`Categorical` (K): z is a one-hot row of K; pi = softmax(scores).
- :class:`BitVector` (D, budget): z in {0, 1}^D, at most ``budget`` ones when one
  is set; the score of z is scores . z and the Monte Carlo distribution is the
  mean-field Bernoulli(sigmoid(scores)) (Correia et al., NeurIPS 2020, Sec. 5.3).
"""

import heapq

import torch
import torch.nn.functional as F

from ..modules.probability import binary_concrete, gumbel_noise


class Categorical:
    def __init__(self, num_classes):
        self.num_classes = num_classes

    def __repr__(self):
        return f"Categorical({self.num_classes})"

    def log_prob(self, scores, z):
        return (torch.log_softmax(scores, -1) * z).sum(-1)

    def sample(self, scores):
        z = torch.multinomial(torch.softmax(scores.detach(), -1), 1).squeeze(-1)
        return F.one_hot(z, self.num_classes).to(scores.dtype)

    def entropy(self, scores):
        return -(torch.softmax(scores, -1) * torch.log_softmax(scores, -1)).sum(-1)

    def relaxed_sample(self, scores, temperature):
        """Gumbel-softmax: softmax((scores + g) / tau), g ~ Gumbel(0, 1)."""
        return torch.softmax((scores + gumbel_noise(scores)) / temperature, -1)

    def harden(self, relaxed):
        return F.one_hot(relaxed.argmax(-1), self.num_classes).to(relaxed.dtype)


class BitVector:
    def __init__(self, bits, budget=None):
        if budget is not None and not 0 < budget <= bits:
            raise ValueError(f"a budget of {budget} ones does not fit {bits} bits")
        self.bits, self.budget = bits, budget

    def __repr__(self):
        return f"BitVector({self.bits}, budget={self.budget})"

    def with_budget(self, budget):
        return BitVector(self.bits, budget)

    def log_prob(self, scores, z):
        return (z * F.logsigmoid(scores) + (1 - z) * F.logsigmoid(-scores)).sum(-1)

    def sample(self, scores):
        return torch.bernoulli(torch.sigmoid(scores.detach()))

    def entropy(self, scores):
        p = torch.sigmoid(scores)
        return -(p * F.logsigmoid(scores) + (1 - p) * F.logsigmoid(-scores)).sum(-1)

    def relaxed_sample(self, scores, temperature):
        """Binary Concrete (Maddison et al. 2017): sigmoid((scores + logistic noise) / tau)."""
        return binary_concrete(scores, temperature)

    def harden(self, relaxed):
        return (relaxed > 0.5).to(relaxed.dtype)

    def map(self, scores):
        """argmax_z scores . z: the positive bits, or the ``budget`` largest positive ones."""
        z = (scores > 0).to(scores.dtype)
        if self.budget is not None and self.budget < self.bits:
            top = scores.topk(self.budget, -1).indices
            z = z * torch.zeros_like(z).scatter(-1, top, 1.0)
        return z

    def kbest(self, scores, k):
        """The k highest-scoring bit-vectors of each row (B, k, D), best first, unconstrained.

        The best sets the positive bits; any other differs from it by a set of flips,
        each costing |score_i|, so the k best are the k cheapest flip sets.  They are
        enumerated from a heap over the costs sorted ascending: a set whose largest
        index is i begets "also flip i+1" and "flip i+1 instead of i", which visits
        every set once, cheapest first (the k-best subset sums)."""
        if self.budget is not None:
            raise ValueError("top-k over bit-vectors is implemented without a budget")
        k = min(k, 2 ** min(self.bits, 62))
        best = (scores > 0).to(scores.dtype)
        costs, order = scores.detach().abs().sort(-1)
        out = best.unsqueeze(1).repeat(1, k, 1)
        costs_list, order_list = costs.tolist(), order.tolist()
        for row in range(scores.shape[0]):
            c, idx = costs_list[row], order_list[row]
            flips = [()]
            heap = [(c[0], (0,))]
            while len(flips) < k:
                cost, chosen = heapq.heappop(heap)
                flips.append(chosen)
                last = chosen[-1]
                if last + 1 < self.bits:
                    heapq.heappush(heap, (cost + c[last + 1], chosen + (last + 1,)))
                    heapq.heappush(heap, (cost - c[last] + c[last + 1], chosen[:-1] + (last + 1,)))
            for j, chosen in enumerate(flips[1:], start=1):
                bits = [idx[i] for i in chosen]
                out[row, j, bits] = 1 - out[row, j, bits]
        return out

