"""Estimators of E_{z ~ pi(.|x)} loss(x, z) for a discrete latent z, and of its gradient.

Correia, Niculae, Aziz & Martins, "Efficient Marginalization of Discrete and
Structured Latent Variables via Sparsity" (NeurIPS 2020).  Every estimator has
one interface: given scores (B, dim) and ``loss_fn(rows, z)``, which decodes
example ``rows[i]`` with the latent ``z[i]`` (a one-hot row of K, a bit-vector, or
a relaxed one) and returns one loss per pair, it returns an :class:`Estimate`:

- ``surrogate`` (B,): differentiate its sum to get the estimator's gradient, in
  the scores and in everything ``loss_fn`` depends on; its value is ``loss``;
- ``loss`` (B,): the estimate of the expected loss, for logging;
- ``decoder_calls`` (B,): how many times each example was decoded (the cost the
  paper's tables report);
- ``entropy`` (B,): the Shannon entropy of the distribution the expectation is
  taken under (differentiable), for an ELBO's KL term.

The latent space (:mod:`.spaces`) is categorical unless the estimator is built
with a :class:`~.spaces.BitVector` space.  Marginalisation is exact: ``dense``
decodes every z under softmax, ``sparsemax`` only the z that sparsemax gives
nonzero probability, ``topk_sparsemax`` only the k best (and says when that
equals sparsemax), ``sparsemap`` / ``sparsemap_budget`` the few bit-vectors
SparseMAP selects.  The Monte Carlo estimators decode samples: ``sfe`` (REINFORCE,
moving-average baseline), ``sfe_plus`` (the baseline is the loss of an
independent sample), ``nvil`` (a centred, learned baseline; Mnih & Gregor 2014),
``gumbel`` (Gumbel-softmax / Binary Concrete relaxation; Jang et al. 2017,
Maddison et al. 2017), ``st_gumbel`` (straight-through), ``sum_and_sample`` (the
k most probable summed exactly, one sample from the rest; Liu et al. 2019),
``unordered_set`` (k samples without replacement; Kool et al. 2020).
"""

import itertools
import math
from dataclasses import dataclass, field, fields, make_dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..entmax import sparsemax
from ..entmax.losses import entmax_loss
from ..modules.probability import gumbel_noise
from .sparsemap import sparsemap
from .spaces import BitVector, Categorical

ESTIMATORS = {}


def option(default, help, check=None, requirement=None):
    """A field of an estimator's options: its default, its help and its rule, stated once.
    A setting an estimator would turn into a crash or a NaN far from the command line is
    refused when its options are made, by the option's name."""
    return field(default=default, metadata={"help": help, "check": check, "requirement": requirement})


@dataclass(frozen=True)
class Options:
    """An estimator's options (each estimator's own subclass; none here): read alike by its
    Python constructor and, through :data:`EstimatorOptions`, by the command line."""

    def __post_init__(self):
        for f in fields(self):
            check, value = f.metadata.get("check"), getattr(self, f.name)
            if check is not None and not check(value):
                raise ValueError(f"--{f.name.replace('_', '-')} {value}: {f.metadata['requirement']}")


def _baseline_decay():  # shared by sfe, nvil and sum_and_sample
    return option(0.99, "moving-average decay of the baseline of sfe, nvil and sum_and_sample",
                  lambda v: 0 <= v <= 1, "must be in [0, 1]")


def _bit_states():  # shared by sparsemap and sparsemap_budget
    return option(1, "SparseMAP's quadratic term over bit-vectors: 1, on the bits (1/2 ||mu||^2); 2, on both "
                     "states of each bit, as the paper's code (lp-sparsemap's Bernoulli factor)",
                  lambda v: v in (1, 2), "must be 1 or 2")


@dataclass(frozen=True)
class TopKOptions(Options):
    topk: int = option(10, "structures topk_sparsemax keeps (its k)", lambda v: v >= 1, "must be at least 1")


@dataclass(frozen=True)
class SparseMAPOptions(Options):
    bit_states: int = _bit_states()


@dataclass(frozen=True)
class SparseMAPBudgetOptions(Options):
    budget: int = option(0, "most ones of a bit-vector under sparsemap_budget (0: half the bits)",
                         lambda v: v >= 0, "must be at least 0 (0: half the bits)")
    bit_states: int = _bit_states()


@dataclass(frozen=True)
class BaselineOptions(Options):
    baseline_decay: float = _baseline_decay()


@dataclass(frozen=True)
class GumbelOptions(Options):
    gumbel_temperature: float = option(1.0, "initial Gumbel-softmax temperature", lambda v: v > 0,
                                       "must be above 0")  # the relaxed sample divides by it
    gumbel_min_temperature: float = option(0.5, "lowest Gumbel-softmax temperature", lambda v: v > 0,
                                           "must be above 0")
    gumbel_anneal_rate: float = option(1e-4, "tau = max(min, tau0 exp(-rate * step))", lambda v: v >= 0,
                                       "must be at least 0")


@dataclass(frozen=True)
class SumAndSampleOptions(Options):
    summed: int = option(10, "categories sum_and_sample sums exactly (its k; the rest is sampled once)",
                         lambda v: v >= 1, "must be at least 1")
    baseline_decay: float = _baseline_decay()


@dataclass(frozen=True)
class UnorderedSetOptions(Options):
    set_size: int = option(4, "samples without replacement of unordered_set (at most 6)", lambda v: 1 <= v <= 6,
                           "must be 1 to 6 (the set's probability sums over its m! orders)")


def register_estimator(name):
    def register(cls):
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} registered twice")
        cls.name = name
        ESTIMATORS[name] = cls
        return cls
    return register


def _estimator_class(name):
    if name not in ESTIMATORS:
        raise ValueError(f"--estimator {name!r}: choose one of {', '.join(sorted(ESTIMATORS))}")
    return ESTIMATORS[name]


def build_estimator(name, **options):
    """The estimator called ``name``, with the options its constructor takes (``space``:
    the latent space; categorical over the scores' last dimension when not given)."""
    return _estimator_class(name)(**options)


def build_estimator_from_options(name, options, space=None):
    """The estimator called ``name`` in ``space``, given the values of the options it takes
    (``options``: an :class:`EstimatorOptions`, or a config with its fields)."""
    cls = _estimator_class(name)
    return cls(space=space, **{f.name: getattr(options, f.name) for f in fields(cls.Options)})


@dataclass
class Estimate:
    surrogate: torch.Tensor
    loss: torch.Tensor
    decoder_calls: torch.Tensor
    entropy: torch.Tensor


class Estimator(nn.Module):
    """Base class: an estimator may hold state (a baseline) or parameters (NVIL).

    ``spaces`` lists the latent spaces it works in.  Its distribution pi is
    softmax(scores) (mean-field Bernoulli for bit-vectors) unless it marginalises
    under a sparse one; ``generalized_entropy`` and ``classification_loss`` go with
    that distribution (Shannon entropy and cross-entropy for softmax; Gini entropy
    and the sparsemax loss, its Fenchel-Young counterpart, for sparsemax)."""

    name = None
    sparse = False
    spaces = (Categorical, BitVector)
    # Its options (an :class:`Options` dataclass): the constructor takes them by the same names,
    # with the same defaults, and checks them by making them (``self.options``).
    Options = Options
    # {an argument's old name: its name now}, refused with a message naming the new one
    renamed = {}

    def __init__(self, space=None, old=None, **options):
        super().__init__()
        for name in old or ():
            new = self.renamed.get(name)
            hint = f": it is now {new}= (--{new.replace('_', '-')})" if new else ""
            raise TypeError(f"{type(self).__name__} takes no argument {name!r}{hint}")
        if space is not None and not isinstance(space, self.spaces):
            raise ValueError(f"--estimator {self.name}: works on {' or '.join(c.__name__ for c in self.spaces)} "
                             f"latents, not {space!r}")
        self.space = space
        self.options = self.Options(**options)

    def space_for(self, scores):
        return self.space if self.space is not None else Categorical(scores.shape[-1])

    def forward(self, scores, loss_fn, features=None):
        raise NotImplementedError

    def generalized_entropy(self, scores):
        if self.sparse and isinstance(self.space, BitVector):
            raise ValueError(f"--estimator {self.name}: the Gini entropy of its distribution is defined here for "
                             "categorical latents only; use Estimate.entropy (Shannon) for bit-vectors")
        if self.sparse:
            p = sparsemax(scores, -1)
            return 0.5 * (1 - p.pow(2).sum(-1))
        return self.space_for(scores).entropy(scores)

    def classification_loss(self, scores, target):
        if self.sparse:
            return entmax_loss(scores, target, alpha=2.0)
        return F.cross_entropy(scores, target, reduction="none")


def _shannon(probs):
    """-sum p log p over the support, with zero gradient off it."""
    positive = probs > 0
    return -torch.where(positive, probs * torch.log(torch.where(positive, probs, torch.ones_like(probs))),
                        torch.zeros_like(probs)).sum(-1)


def _decode_support(probs, loss_fn, structures=None, decode=None):
    """sum_s probs[b, s] loss(b, z_s) over the s with probs > 0, decoding only those (or
    those where ``decode`` is True); z_s is the one-hot of s, or ``structures[b, s]``.
    Returns (expectation, calls)."""
    rows, s = (probs.gt(0) if decode is None else decode).nonzero(as_tuple=True)
    z = F.one_hot(s, probs.shape[1]).to(probs.dtype) if structures is None else structures[rows, s]
    losses = loss_fn(rows, z)
    expected = torch.zeros(probs.shape[0], dtype=losses.dtype, device=probs.device)
    expected = expected.index_add(0, rows, probs[rows, s] * losses)
    calls = torch.bincount(rows, minlength=probs.shape[0]).to(probs.dtype)
    return expected, calls


def _exact(probs, loss_fn, structures=None):
    expected, calls = _decode_support(probs, loss_fn, structures)
    return Estimate(expected, expected, calls, _shannon(probs))


@register_estimator("dense")
class Dense(Estimator):
    """Exact expectation under softmax: every z is decoded (K calls)."""

    spaces = (Categorical,)

    def forward(self, scores, loss_fn, features=None):
        # A peaked softmax has probabilities far below any representable share of the
        # expectation (the largest is at least 1/K), many of them denormal; in backward they
        # made a CPU update of the signaling game 6 times slower (a peaked 256-way sender,
        # 14% of its probabilities denormal).  Below sqrt(tiny) (1e-19 in float32) they are
        # exact zeros, with zero gradient, so no product of two such factors is denormal.
        # (latent_marginalization also flushes denormals process-wide; this keeps the
        # estimator fast where it is called without that criterion.)
        negligible = torch.log_softmax(scores.detach(), -1) < 0.5 * math.log(torch.finfo(scores.dtype).tiny)
        probs = torch.softmax(scores.masked_fill(negligible, float("-inf")), -1)
        # Decode every z even where its weight is 0: dense costs K calls.
        expected, calls = _decode_support(probs, loss_fn, decode=torch.ones_like(probs, dtype=torch.bool))
        return Estimate(expected, expected, calls, self.space_for(scores).entropy(scores))


@register_estimator("sparsemax")
class Sparsemax(Estimator):
    """Exact expectation under sparsemax: only the support is decoded."""

    sparse = True
    spaces = (Categorical,)

    def forward(self, scores, loss_fn, features=None):
        return _exact(sparsemax(scores, -1), loss_fn)


def topk_sparsemax(scores, k):
    """Sparsemax over each row's k best scores (zero elsewhere), and per row whether it
    provably equals sparsemax over the whole row: it does when fewer than k of the k
    best get nonzero probability, since then the threshold lies above the k-th best
    score and hence above every score outside the k best."""
    k = min(k, scores.shape[-1])
    top, index = scores.topk(k, dim=-1)
    p_top = sparsemax(top, -1)
    probs = torch.zeros_like(scores).scatter(-1, index, p_top)
    certified = p_top.gt(0).sum(-1) < k
    if k == scores.shape[-1]:
        certified = torch.ones_like(certified)
    return probs, certified


@register_estimator("topk_sparsemax")
class TopKSparsemax(Estimator):
    """Sparsemax over the k best z (k calls at most); ``last_certified`` says for which
    examples that was exactly sparsemax.  Over bit-vectors, the k best structures
    under scores . z, and sparsemax over their scores."""

    sparse = True
    Options = TopKOptions

    def __init__(self, topk=TopKOptions.topk, space=None):
        super().__init__(space, topk=topk)
        if isinstance(space, BitVector) and space.budget is not None:
            raise ValueError("--estimator topk_sparsemax: bit-vectors with a budget are not supported")
        self.topk = topk
        self.last_certified = None

    def support(self, scores):
        """Over bit-vectors: (probabilities (B, k), the k best structures (B, k, D))."""
        structures = self.space.kbest(scores, self.topk)
        p = sparsemax((structures * scores[:, None]).sum(-1), -1)
        # The same certificate as over categories: a zero among the k best proves that
        # no structure outside them would have entered the support.
        self.last_certified = p.gt(0).sum(-1).lt(structures.shape[1]) | (2 ** self.space.bits <= self.topk)
        return p, structures

    def forward(self, scores, loss_fn, features=None):
        if isinstance(self.space, BitVector):
            probs, structures = self.support(scores)
            return _exact(probs, loss_fn, structures)
        probs, self.last_certified = topk_sparsemax(scores, self.topk)
        return _exact(probs, loss_fn)


@register_estimator("sparsemap")
class SparseMAP(Estimator):
    """Exact expectation under SparseMAP over bit-vectors (:mod:`.sparsemap`): only the
    few structures of its active set are decoded."""

    sparse = True
    spaces = (BitVector,)
    Options = SparseMAPOptions

    def __init__(self, space=None, bit_states=SparseMAPOptions.bit_states, **options):
        if not isinstance(space, BitVector):
            raise ValueError(f"--estimator {self.name}: needs a bit-vector latent space, not {space!r}")
        super().__init__(space, bit_states=bit_states, **options)
        self.bit_states = bit_states

    def support(self, scores):
        """(probabilities (B, S), structures (B, S, D)), padded with probability 0."""
        return sparsemap(scores, self.space, self.bit_states)

    def forward(self, scores, loss_fn, features=None):
        probs, structures = self.support(scores)
        return _exact(probs, loss_fn, structures)


@register_estimator("sparsemap_budget")
class SparseMAPBudget(SparseMAP):
    """SparseMAP over bit-vectors with at most ``budget`` ones (0: half the bits)."""

    Options = SparseMAPBudgetOptions

    def __init__(self, space=None, budget=SparseMAPBudgetOptions.budget,
                 bit_states=SparseMAPBudgetOptions.bit_states):
        if not isinstance(space, BitVector):
            raise ValueError(f"--estimator {self.name}: needs a bit-vector latent space, not {space!r}")
        if not 0 <= budget <= space.bits:
            raise ValueError(f"--budget {budget}: must be 0 (half the bits) to the {space.bits} latent bits")
        super().__init__(space.with_budget(budget or max(1, space.bits // 2)), bit_states, budget=budget)


def _decode(loss_fn, z):
    return loss_fn(torch.arange(z.shape[0], device=z.device), z)


class MovingAverage(nn.Module):
    """b <- decay b + (1 - decay) mean(loss), a baseline for the score-function terms;
    ``forward`` returns the value from before this batch (so b never depends on z)."""

    def __init__(self, decay=0.99):
        super().__init__()
        self.decay = decay
        self.register_buffer("value", torch.zeros(()))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, loss):
        b = self.value.clone()
        if self.training:
            with torch.no_grad():
                mean = loss.detach().mean()
                self.value.copy_(mean if self.steps == 0 else self.decay * self.value + (1 - self.decay) * mean)
                self.steps += 1
        return b


def _zero_valued(x):
    """x - x.detach(): zero in value, x's gradient (keeps a surrogate's value the loss estimate)."""
    return x - x.detach()


def _score_function(log_prob, loss, baseline):
    """loss + (loss - b) grad-only(log pi(z)): REINFORCE's gradient, unbiased for any b not
    depending on z; in value, the loss."""
    return loss + (loss - baseline).detach() * _zero_valued(log_prob)


@register_estimator("sfe")
class ScoreFunction(Estimator):
    """REINFORCE, z ~ pi, with a moving average of past losses as baseline (1 call)."""

    Options = BaselineOptions

    def __init__(self, baseline_decay=BaselineOptions.baseline_decay, space=None):
        super().__init__(space, baseline_decay=baseline_decay)
        self.baseline = MovingAverage(baseline_decay)

    def forward(self, scores, loss_fn, features=None):
        space = self.space_for(scores)
        z = space.sample(scores)
        loss = _decode(loss_fn, z)
        surrogate = _score_function(space.log_prob(scores, z), loss, self.baseline(loss))
        return Estimate(surrogate, loss, torch.ones_like(loss), space.entropy(scores))


@register_estimator("sfe_plus")
class ScoreFunctionSelfCritic(Estimator):
    """REINFORCE whose baseline is the loss of a second, independent sample (2 calls)."""

    def forward(self, scores, loss_fn, features=None):
        space = self.space_for(scores)
        z, z_baseline = space.sample(scores), space.sample(scores)
        loss = _decode(loss_fn, z)
        with torch.no_grad():
            b = _decode(loss_fn, z_baseline)
        surrogate = _score_function(space.log_prob(scores, z), loss, b)
        return Estimate(surrogate, loss, torch.full_like(loss, 2.0), space.entropy(scores))


@register_estimator("nvil")
class NVIL(Estimator):
    """REINFORCE with the baseline of Mnih & Gregor (2014): a moving average of the loss
    (centring) plus b(x), a linear function of the example's features (built on first
    use) trained by regression onto what the average leaves (1 call)."""

    Options = BaselineOptions

    def __init__(self, baseline_decay=BaselineOptions.baseline_decay, features_dim=None, space=None):
        super().__init__(space, baseline_decay=baseline_decay)
        self.centre = MovingAverage(baseline_decay)
        self.baseline = nn.LazyLinear(1) if features_dim is None else nn.Linear(features_dim, 1)

    def forward(self, scores, loss_fn, features=None):
        if features is None:
            raise ValueError("the nvil estimator needs the example features for its baseline")
        space = self.space_for(scores)
        z = space.sample(scores)
        loss = _decode(loss_fn, z)
        centre = self.centre(loss)
        b = centre + self.baseline(features.detach().to(self.baseline.weight.dtype)).squeeze(-1).to(loss.dtype)
        surrogate = _score_function(space.log_prob(scores, z), loss, b) + _zero_valued((loss.detach() - b) ** 2)
        return Estimate(surrogate, loss, torch.ones_like(loss), space.entropy(scores))


class _GumbelBase(Estimator):
    """Temperature tau = max(tau_min, tau_0 exp(-rate * step)), step counted in training."""

    Options = GumbelOptions
    renamed = {"temperature": "gumbel_temperature", "min_temperature": "gumbel_min_temperature",
               "anneal_rate": "gumbel_anneal_rate"}

    def __init__(self, gumbel_temperature=GumbelOptions.gumbel_temperature,
                 gumbel_min_temperature=GumbelOptions.gumbel_min_temperature,
                 gumbel_anneal_rate=GumbelOptions.gumbel_anneal_rate, space=None, **old):
        super().__init__(space, old, gumbel_temperature=gumbel_temperature,
                         gumbel_min_temperature=gumbel_min_temperature, gumbel_anneal_rate=gumbel_anneal_rate)
        self.tau0, self.tau_min, self.rate = gumbel_temperature, gumbel_min_temperature, gumbel_anneal_rate
        self.register_buffer("step", torch.zeros((), dtype=torch.long))

    def temperature(self):
        return max(self.tau_min, self.tau0 * math.exp(-self.rate * int(self.step)))

    def relaxed(self, scores):
        soft = self.space_for(scores).relaxed_sample(scores, self.temperature())
        if self.training:
            self.step += 1
        return soft


@register_estimator("gumbel")
class GumbelSoftmax(_GumbelBase):
    """The decoder reads a relaxed sample: softmax((scores + g) / tau), or Binary Concrete
    for bit-vectors (biased; 1 call)."""

    def forward(self, scores, loss_fn, features=None):
        loss = _decode(loss_fn, self.relaxed(scores))
        return Estimate(loss, loss, torch.ones_like(loss), self.space_for(scores).entropy(scores))


@register_estimator("st_gumbel")
class StraightThroughGumbel(_GumbelBase):
    """The decoder reads the hard sample (argmax of scores + g, or bits thresholded at 1/2);
    gradients pass through the relaxed one (biased; 1 call)."""

    def forward(self, scores, loss_fn, features=None):
        soft = self.relaxed(scores)
        hard = self.space_for(scores).harden(soft)
        loss = _decode(loss_fn, hard - soft.detach() + soft)
        return Estimate(loss, loss, torch.ones_like(loss), self.space_for(scores).entropy(scores))


def _sample(probs):
    return torch.multinomial(probs, 1).squeeze(-1)


@register_estimator("sum_and_sample")
class SumAndSample(Estimator):
    """Rao-Blackwellised REINFORCE (Liu et al. 2019): the k most probable z are summed
    exactly, the rest by one sample z' drawn from pi restricted to them, weighted by
    their mass:  sum_{z in T} pi(z) loss(z) + (1 - pi(T)) loss(z'),  with the score
    function term for z', with a moving-average baseline (k + 1 calls)."""

    spaces = (Categorical,)

    Options = SumAndSampleOptions
    renamed = {"topk": "summed"}

    def __init__(self, summed=SumAndSampleOptions.summed, baseline_decay=SumAndSampleOptions.baseline_decay,
                 space=None, **old):
        super().__init__(space, old, summed=summed, baseline_decay=baseline_decay)
        self.summed = summed
        self.baseline = MovingAverage(baseline_decay)

    def forward(self, scores, loss_fn, features=None):
        B, K = scores.shape
        k = min(self.summed, K - 1)
        log_probs = torch.log_softmax(scores, -1)
        probs = log_probs.exp()
        top = probs.detach().topk(k, -1).indices
        in_top = torch.zeros_like(probs, dtype=torch.bool).scatter(1, top, True)
        summed, _ = _decode_support(torch.where(in_top, probs, torch.zeros_like(probs)), loss_fn)
        rest = torch.where(in_top, torch.zeros_like(probs), probs)
        rest_mass = rest.sum(-1)
        z = _sample((rest / rest_mass[:, None]).detach())
        loss_z = _decode(loss_fn, F.one_hot(z, K).to(scores.dtype))
        # sum_{z not in T} pi(z) loss(z) = m E_q[loss], m = 1 - pi(T), q = pi / m off T; its gradient
        # is grad(m) E_q[loss] + m E_q[(loss - b) grad log q], unbiased for any baseline b
        # (q sums to one; pi restricted off T does not, so b must go with log q, not log pi).
        log_q = log_probs.gather(1, z[:, None]).squeeze(1) - torch.log(rest_mass)
        score = (loss_z - self.baseline(loss_z)).detach() * _zero_valued(log_q)
        sampled = rest_mass * loss_z.detach() + rest_mass.detach() * (_zero_valued(loss_z) + score)
        surrogate = summed + sampled
        loss = summed.detach() + rest_mass.detach() * loss_z.detach()
        return Estimate(surrogate, loss, torch.full_like(loss, float(k + 1)), self.space_for(scores).entropy(scores))


def unordered_set_probability(p, rest=None):
    """P(S) for the unordered set of the columns of ``p`` (B, m): the probabilities under
    which they are drawn without replacement, summed over the m! orders in which they
    can come (Kool et al. 2020, eq. 4): sum_orders prod_i p_i / (1 - sum_{j<i} p_j).
    ``rest`` (B,) is the mass outside the set (1 - sum p unless given): each
    denominator is computed as rest + the set's mass still undrawn, a sum of positive
    terms, because 1 - sum p_j cancels catastrophically for peaked distributions.
    Exact; the m! orders keep m small (at most 6)."""
    m = p.shape[1]
    if m > 6:
        raise ValueError(f"the unordered-set probability enumerates m! orders; m = {m} is too many (at most 6)")
    if rest is None:
        rest = (1 - p.sum(1)).clamp_min(0)
    total = p.new_zeros(p.shape[0])
    for order in itertools.permutations(range(m)):
        q = p[:, list(order)]
        undrawn = rest[:, None] + q.flip(1).cumsum(1).flip(1)  # rest + sum_{j >= i} q_j
        total = total + (q / undrawn).prod(1)
    return total


def _leave_out(p, rest, i):
    """The set's probabilities without item i, and the mass outside it, renormalised to
    the domain without item i (divided by 1 - p_i, computed as a sum of the rest)."""
    kept = torch.cat([p[:, :i], p[:, i + 1:]], 1)
    norm = rest + kept.sum(1)
    return kept / norm[:, None], rest / norm


@register_estimator("unordered_set")
class UnorderedSet(Estimator):
    r"""The unordered set estimator with built-in baseline (Kool, van Hoof & Welling,
    ICLR 2020, eq. 11): k distinct z drawn without replacement (Gumbel-top-k), then

        E[loss] ~ sum_{s in S} p(s) R(S, s) loss(s),   R(S, s) = P^{D \ s}(S \ s) / P(S),
        grad    ~ sum_{s in S} p(s) R(S, s) grad log p(s) (loss(s) - sum_{s' in S} p(s') R^{D \ s}(S, s') loss(s')),

    R^{D \ s}(S, s') = P^{D \ {s, s'}}(S \ {s, s'}) / P^{D \ s}(S \ s) (1 for s' = s).
    Unbiased in value and gradient; k calls."""

    spaces = (Categorical,)

    Options = UnorderedSetOptions
    renamed = {"topk": "set_size"}

    def __init__(self, set_size=UnorderedSetOptions.set_size, space=None, **old):
        super().__init__(space, old, set_size=set_size)
        self.set_size = set_size

    def forward(self, scores, loss_fn, features=None):
        B, K = scores.shape
        k = min(self.set_size, K)
        log_probs = torch.log_softmax(scores, -1)
        chosen = (log_probs.detach() + gumbel_noise(scores)).topk(k, -1).indices  # Gumbel-top-k
        losses = torch.stack([_decode(loss_fn, F.one_hot(chosen[:, i], K).to(scores.dtype)) for i in range(k)], 1)
        with torch.no_grad():
            # In float64: P(S) is a product of up to k small ratios, and R a ratio of two such.
            probs = log_probs.detach().double().exp()
            p = probs.gather(1, chosen)
            rest = probs.scatter(1, chosen, 0.0).sum(1)  # the mass outside S, summed, not subtracted
            total = unordered_set_probability(p, rest).clamp_min(torch.finfo(torch.float64).tiny)
            leave_one_out = [_leave_out(p, rest, i) for i in range(k)]
            weights = p * torch.stack([unordered_set_probability(*lo) for lo in leave_one_out], 1) / total[:, None]
            baselines = []
            for i, (inner_p, inner_rest) in enumerate(leave_one_out):  # the set S \ s under D \ s
                inner_total = unordered_set_probability(inner_p, inner_rest).clamp_min(torch.finfo(torch.float64).tiny)
                r = torch.ones_like(p)
                for j in range(k):
                    if j != i:
                        r[:, j] = unordered_set_probability(*_leave_out(inner_p, inner_rest, j if j < i else j - 1))
                        r[:, j] /= inner_total
                baselines.append((p * r * losses.detach().double()).sum(1))
            weights, baseline = weights.to(scores.dtype), torch.stack(baselines, 1).to(scores.dtype)
        log_p = log_probs.gather(1, chosen)
        surrogate = (weights * losses).sum(1) + (weights * (losses.detach() - baseline) * _zero_valued(log_p)).sum(1)
        loss = (weights * losses.detach()).sum(1)
        return Estimate(surrogate, loss, torch.full_like(loss, float(k)), self.space_for(scores).entropy(scores))


def _command_line_options():
    """Every estimator's options in one dataclass, the ``latent_marginalization`` criterion's
    (``--topk``, ``--set-size``, ...): each option once, as its estimator states it; an
    option two estimators share must be stated alike by both."""
    union = {}
    for cls in ESTIMATORS.values():
        for f in fields(cls.Options):
            stated = (f.default, f.metadata["help"])
            if union.setdefault(f.name, (f, stated))[1] != stated:
                raise TypeError(f"option {f.name}: stated differently by two estimators")
    return make_dataclass("EstimatorOptions", [(name, f.type, field(default=f.default, metadata=dict(f.metadata)))
                                               for name, (f, _) in sorted(union.items())])


# The union of every estimator's options, as the command line offers them.
EstimatorOptions = _command_line_options()
