"""The Gaussian KL term against Monte Carlo, the regularisers' values, and HSVAE's samplers."""

import math

import pytest
import torch

from fairseq_sparse.modules.probability import gaussian_kl


def test_gaussian_kl_matches_monte_carlo():
    torch.manual_seed(0)
    mean = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    log_var = torch.tensor([[0.3, -0.7, 0.1]], dtype=torch.float64)
    std = (0.5 * log_var).exp()
    z = mean + std * torch.randn(400000, 3, dtype=torch.float64)
    log_q = torch.distributions.Normal(mean, std).log_prob(z).sum(-1)
    log_p = torch.distributions.Normal(0.0, 1.0).log_prob(z).sum(-1)
    samples = log_q - log_p
    estimate, stderr = samples.mean(), samples.std() / 400000 ** 0.5
    assert abs(gaussian_kl(mean, log_var).item() - estimate.item()) < 5 * stderr.item()
    assert gaussian_kl(torch.zeros(2, 4), torch.zeros(2, 4)).abs().max() == 0  # q = prior


def test_spike_and_slab_prior_is_a_density_and_its_sampler_agrees():
    from fairseq_sparse.modules.probability import spike_and_slab_log_prob
    from fairseq_sparse.sentence_vae.mat_vae import sample_spike_and_slab

    grid = torch.linspace(-8, 8, 400001, dtype=torch.float64)[:, None]
    density = spike_and_slab_log_prob(grid, 0.8, 0.05).sum(-1).exp()
    assert torch.trapezoid(density, grid[:, 0]).item() == pytest.approx(1.0, abs=1e-6)
    torch.manual_seed(1)
    samples = sample_spike_and_slab(200000, 1, 0.8, 0.05, torch.zeros(1, dtype=torch.float64))
    inside = (samples.abs() < 0.1).double().mean().item()  # P(|z| < 0.1) by the density
    mask = grid[:, 0].abs() < 0.1
    assert inside == pytest.approx(torch.trapezoid(density[mask], grid[mask, 0]).item(), abs=0.005)


def test_imq_mmd_separates_distributions():
    from fairseq_sparse.sentence_vae.mat_vae import imq_mmd

    torch.manual_seed(2)
    same = [imq_mmd(torch.randn(300, 4), torch.randn(300, 4)).item() for _ in range(5)]
    shifted = imq_mmd(torch.randn(300, 4), torch.randn(300, 4) + 1.0).item()
    assert max(abs(v) for v in same) < 0.02 < shifted  # unbiased: near 0 when equal


def hsvae_criterion(**options):
    from types import SimpleNamespace

    from fairseq_sparse.sentence_vae.hsvae import HSVAECriterion

    task = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: 1))
    cfg = dict(kl_weight=1.0, gamma_kl_weight=1.0, prior_alpha=5.0, prior_beta=0.5, temperature=0.1,
               spike_std=0.0, hard_slab=False, kl_z_estimate="closed_form")
    return HSVAECriterion(SimpleNamespace(**{**cfg, **options}), task)


@pytest.mark.parametrize("sampler", [{}, {"spike_std": 0.05, "hard_slab": True},
                                     {"spike_std": 0.05, "hard_slab": True, "kl_z_estimate": "sample"}])
@pytest.mark.parametrize("extreme", [1e-2, 1e2])
def test_hsvae_is_finite_at_extreme_beta_parameters(extreme, sampler):
    criterion = hsvae_criterion(**sampler)
    raw = torch.full((64, 8), extreme, requires_grad=True)
    posterior = {"mean": torch.full((64, 8), 30.0, requires_grad=True),
                 "log_var": torch.full((64, 8), -20.0, requires_grad=True),
                 "gamma_a": raw, "gamma_b": (1e-2 + 1e2 - raw)}
    z, terms, kl_terms, mean_code = criterion.latent(posterior)
    (terms.sum() + z.sum()).backward()
    assert set(kl_terms) == {"kl_z", "kl_gamma"}
    for t in (z, terms, *kl_terms.values(), mean_code, raw.grad, posterior["mean"].grad):
        assert torch.isfinite(t).all()


def spike_or_slab_posterior(n=20000, dim=4):
    """gamma = 1/2 in expectation (Beta(100, 100)); the slab at N(5, 0.1^2), far from any spike."""
    return {"mean": torch.full((n, dim), 5.0), "log_var": torch.full((n, dim), 2 * math.log(0.1)),
            "gamma_a": torch.full((n, dim), 100.0), "gamma_b": torch.full((n, dim), 100.0)}


def test_hsvae_authors_sampler_draws_the_slab_or_a_narrow_gaussian_spike():
    torch.manual_seed(0)
    z = hsvae_criterion(spike_std=0.05, hard_slab=True).latent(spike_or_slab_posterior())[0]
    slab, spike = (z - 5).abs() < 1, z.abs() < 0.5
    assert (slab | spike).all()  # nothing in between: the indicator is 0 or 1
    assert slab.float().mean().item() == pytest.approx(0.5, abs=0.01)  # Bernoulli(1 - E[gamma])
    assert z[spike].std().item() == pytest.approx(0.05, rel=0.03)
    assert z[slab].std().item() == pytest.approx(0.1, rel=0.03)


def test_hsvae_spike_is_exactly_zero_by_default_and_the_relaxed_slab_shrinks():
    torch.manual_seed(0)
    hard = hsvae_criterion(hard_slab=True).latent(spike_or_slab_posterior())[0]
    assert ((hard == 0) | ((hard - 5).abs() < 1)).all()
    assert (hard == 0).float().mean().item() == pytest.approx(0.5, abs=0.01)
    relaxed = hsvae_criterion(temperature=0.5).latent(spike_or_slab_posterior())[0]
    # A relaxed indicator scales the slab: values strictly between the spike and the slab occur.
    assert ((relaxed > 0.5) & (relaxed < 4)).float().mean().item() > 0.05


def mixture_kl_by_quadrature(gamma, mean, std, spike_std):
    """KL(gamma N(0, s^2) + (1 - gamma) N(mean, std^2) || gamma N(0, s^2) + (1 - gamma) N(0, 1))
    per dimension, by the trapezoid rule on a fine grid (torch.distributions' densities)."""
    grid = torch.linspace(-12, 12, 2_000_001, dtype=torch.float64)[:, None]
    spike = torch.distributions.Normal(0.0, spike_std).log_prob(grid) + torch.log(gamma)
    log_q = torch.logaddexp(spike, torch.distributions.Normal(mean, std).log_prob(grid) + torch.log1p(-gamma))
    log_p = torch.logaddexp(spike, torch.distributions.Normal(0.0, 1.0).log_prob(grid) + torch.log1p(-gamma))
    return torch.trapezoid(log_q.exp() * (log_q - log_p), grid[:, 0], dim=0)


def test_hsvae_one_sample_kl_estimates_the_mixtures_kl_below_the_closed_form_bound():
    torch.manual_seed(3)
    gamma = torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64)
    mean = torch.tensor([1.5, -0.3, 2.5], dtype=torch.float64)
    std = torch.tensor([0.4, 0.02, 1.3], dtype=torch.float64)
    n, concentration = 200000, 1e7  # Beta(c gamma, c (1 - gamma)): gamma fixed to within 3e-4
    posterior = {"mean": mean.expand(n, 3), "log_var": (2 * std.log()).expand(n, 3),
                 "gamma_a": (concentration * gamma).expand(n, 3),
                 "gamma_b": (concentration * (1 - gamma)).expand(n, 3)}
    options = dict(spike_std=0.05, hard_slab=True)
    kl_z = hsvae_criterion(kl_z_estimate="sample", **options).latent(posterior)[2]["kl_z"]
    exact = mixture_kl_by_quadrature(gamma, mean, std, 0.05).sum().item()
    assert kl_z.mean().item() == pytest.approx(exact, abs=5 * kl_z.std().item() / n ** 0.5)
    # The default charges the slabs' KL, a bound on the mixtures' KL (joint convexity).
    bound = hsvae_criterion(**options).latent(posterior)[2]["kl_z"]
    assert exact < bound.mean().item() - 0.1


@pytest.mark.parametrize("sampler", [{}, {"spike_std": 0.05}, {"hard_slab": True}])
def test_hsvae_refuses_the_one_sample_kl_unless_z_is_drawn_from_the_mixture(sampler):
    with pytest.raises(ValueError, match="--kl-z-estimate sample needs --spike-std > 0 and --hard-slab"):
        hsvae_criterion(kl_z_estimate="sample", **sampler)


@pytest.mark.parametrize("spike_std", [-0.05, float("nan")])
def test_hsvae_refuses_a_bad_spike_std(spike_std):
    with pytest.raises(ValueError, match="--spike-std"):
        hsvae_criterion(spike_std=spike_std)


def tiny_sentence_vae(latent=4, word_dropout=0.0):
    from types import SimpleNamespace

    from fairseq_sparse.sentence_vae.sentence_vae import SentenceVAEModel

    dictionary = type("Dictionary", (), {"pad": lambda self: 1, "unk": lambda self: 3, "__len__": lambda self: 10})()
    return SentenceVAEModel(SimpleNamespace(embed_dim=8, hidden_dim=8, latent_dim=latent, dropout=0.0,
                                            word_dropout=word_dropout), dictionary)


def test_word_dropout_replaces_decoder_input_words_by_unk_in_training_only():
    """Bowman et al.'s word dropout: the start symbol and padding stay, the rest become
    <unk> (id 3 here) at the rate asked for, and only in training."""
    torch.manual_seed(0)
    words = torch.randint(4, 10, (50, 40))
    words[:, 0] = 2  # the start symbol (fairseq's eos)
    words[:10, 30:] = 1  # padding
    real = words.ne(1)
    real[:, 0] = False
    model = tiny_sentence_vae(word_dropout=1.0)
    dropped = model.drop_words(words)
    assert (dropped[:, 0] == 2).all() and (dropped[words.eq(1)] == 1).all() and (dropped[real] == 3).all()
    # At p = 1 the decoder reads no words: other words in the same places give the same logits.
    other = words.masked_scatter(real, torch.randint(4, 10, (int(real.sum()),)))
    assert not torch.equal(other, words)
    z = torch.randn(50, 4)
    torch.testing.assert_close(model.decode(z, words), model.decode(z, other))
    model.eval()  # validation and the analysis see every word
    assert torch.equal(model.drop_words(words), words)
    half = tiny_sentence_vae(word_dropout=0.5).drop_words(words)
    assert (half[~real] == words[~real]).all()
    share = half[real].eq(3).float().mean().item()
    assert 0.47 < share < 0.53, share  # 1,850 words: the binomial's std is 0.012
    assert torch.equal(tiny_sentence_vae(word_dropout=0.0).drop_words(words), words)


def test_sentence_vae_clips_beta_parameters_to_the_authors_range_keeping_gradients():
    from fairseq_sparse.sentence_vae.sentence_vae import BETA_PARAMETER_RANGE

    latent = 4
    model = tiny_sentence_vae(latent)
    # Pre-activations set through the bias: softplus(-5) = 0.0067 lies below the range, softplus(200) above it.
    raw_a, raw_b = torch.full((latent,), -5.0), torch.full((latent,), 200.0)
    with torch.no_grad():
        model.posterior.weight.zero_()
        model.posterior.bias.copy_(torch.cat([torch.zeros(2 * latent), raw_a, raw_b]))
    posterior = model.posterior_parameters(torch.randn(3, 8))
    low, high = BETA_PARAMETER_RANGE
    assert (posterior["gamma_a"] == low).all() and (posterior["gamma_b"] == high).all()
    (posterior["gamma_a"].sum() + posterior["gamma_b"].sum()).backward()
    # The gradient is softplus's, sigmoid(raw), for each of the 3 rows; a plain clamp would give 0.
    torch.testing.assert_close(model.posterior.bias.grad[2 * latent:], 3 * torch.sigmoid(torch.cat([raw_a, raw_b])))


@pytest.mark.parametrize("option, value", [("kl_weight", -1.0), ("gamma_kl_weight", -0.5), ("kl_weight", float("nan")),
                                           ("gamma_kl_weight", float("inf"))])
def test_a_negative_or_non_finite_term_weight_is_refused(option, value):
    with pytest.raises(ValueError, match=f"--{option.replace('_', '-')} {value}: must be a finite number >= 0"):
        hsvae_criterion(**{option: value})


def test_mat_vae_refuses_a_negative_mmd_weight():
    from types import SimpleNamespace

    from fairseq_sparse.sentence_vae.mat_vae import MATVAECriterion, MATVAEConfig

    task = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: 1))
    with pytest.raises(ValueError, match="--mmd-weight -2.0: must be a finite number >= 0"):
        MATVAECriterion(MATVAEConfig(mmd_weight=-2.0), task)
    MATVAECriterion(MATVAEConfig(mmd_weight=0.0), task)
