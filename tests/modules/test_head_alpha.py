import pytest
import torch

from fairseq_sparse.modules import HeadAlpha


def test_fixed_init_and_bounds():
    alpha = HeadAlpha(3, init=1.3, alpha_min=1.01)()
    torch.testing.assert_close(alpha, torch.full((3,), 1.3))
    head = HeadAlpha(2, init=1.5, alpha_min=1.0)
    # alpha_min = 1 is the paper's 1 + sigmoid(a).
    torch.testing.assert_close(head(), 1 + torch.sigmoid(head.pre_alpha))
    with torch.no_grad():
        head.pre_alpha.fill_(-1e4)
    assert bool((head() >= 1.0).all())
    bounded = HeadAlpha(2, init=1.5, alpha_min=1.01)
    with torch.no_grad():
        bounded.pre_alpha.copy_(torch.tensor([-40.0, 40.0]))
    lo, hi = bounded().tolist()
    assert lo == pytest.approx(1.01) and hi == pytest.approx(2.0)


def test_random_init_is_seeded_and_inside_the_range():
    torch.manual_seed(0)
    a = HeadAlpha(64, init="random", alpha_min=1.01)()
    torch.manual_seed(0)
    b = HeadAlpha(64, init="random", alpha_min=1.01)()
    assert torch.equal(a, b)
    assert bool(((a > 1.01) & (a < 2.0)).all()) and a.std() > 0.2


def test_gradient_reaches_pre_alpha_near_the_bound():
    head = HeadAlpha(1, init=1.0101, alpha_min=1.01)
    head().sum().backward()
    assert head.pre_alpha.grad.abs().item() > 0  # rescaling, not clamping, keeps the gradient


@pytest.mark.parametrize("kwargs, message", [
    (dict(init=2.5), "--alpha-init"),
    (dict(init=1.005, alpha_min=1.01), "--alpha-init"),
    (dict(init="sometimes"), "--alpha-init"),
    (dict(alpha_min=2.0), "--alpha-min"),
    (dict(lr_scale=0.0), "--alpha-lr-scale"),
    (dict(lr_scale=-1.0), "--alpha-lr-scale"),
    (dict(lr_scale=float("nan")), "--alpha-lr-scale"),
])
def test_bad_options_name_the_option(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HeadAlpha(2, **kwargs)


def test_initial_alpha_is_kept_through_training_and_checkpoints():
    torch.manual_seed(1)
    head = HeadAlpha(4, init="random")
    start = head().detach().clone()
    torch.testing.assert_close(head.initial_alpha, start)
    opt = torch.optim.Adam(head.parameters(), lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        (head() ** 2).sum().backward()
        opt.step()
    assert not torch.allclose(head(), start)  # training moved the heads ...
    torch.testing.assert_close(head.initial_alpha, start)  # ... not their recorded start
    torch.manual_seed(2)
    restored = HeadAlpha(4, init="random")
    restored.load_state_dict(head.state_dict())
    torch.testing.assert_close(restored.initial_alpha, start)
    torch.testing.assert_close(restored(), head())


def test_a_checkpoint_without_initial_alpha_loads_it_as_unknown():
    old = {"pre_alpha": torch.zeros(3)}  # as written before initial_alpha was kept
    head = HeadAlpha(3, init=1.2)
    head.load_state_dict(old)
    assert bool(head.initial_alpha.isnan().all())
    torch.testing.assert_close(head(), torch.full((3,), 1.505))
    # Nothing to load at all (a stock module's weights, loaded non-strictly): the draw stays.
    fresh = HeadAlpha(3, init=1.2)
    fresh.load_state_dict({}, strict=False)
    torch.testing.assert_close(fresh.initial_alpha, torch.full((3,), 1.2))


@pytest.mark.parametrize("scale", [0.5, 10.0])
def test_lr_scale_starts_alike_and_moves_the_logit_that_many_times_as_far_under_adam(scale):
    """The same alphas at initialisation (random draws included) and, with Adam at the same
    learning rate, logit steps ``scale`` times those of the paper's parametrisation."""
    heads = {}
    for s in (1.0, scale):
        torch.manual_seed(3)
        heads[s] = HeadAlpha(4, init="random", lr_scale=s)
    torch.testing.assert_close(heads[scale](), heads[1.0]())
    torch.testing.assert_close(heads[scale].initial_alpha, heads[1.0].initial_alpha)
    logit = {}
    for s, head in heads.items():
        start = head.lr_scale * head.pre_alpha.detach().clone()
        optimizer = torch.optim.Adam(head.parameters(), lr=1e-3)
        for _ in range(3):  # a loss pulling every head towards alpha = 1.6
            optimizer.zero_grad()
            ((head() - 1.6) ** 2).sum().backward()
            optimizer.step()
        logit[s] = head.lr_scale * head.pre_alpha.detach() - start
    # Adam's first steps are +-lr whatever the gradient's size: exactly in proportion.
    torch.testing.assert_close(logit[scale], scale * logit[1.0], rtol=1e-3, atol=1e-7)
    assert bool((logit[1.0].abs() > 2e-3).all())
    restored = HeadAlpha(4, init="random", lr_scale=scale)
    restored.load_state_dict(heads[scale].state_dict())
    torch.testing.assert_close(restored(), heads[scale]())


def test_the_floor_follows_the_updates_and_old_checkpoints_load_at_alpha_min():
    from fairseq_sparse.entmax import AlphaFloor

    head = HeadAlpha(2, init=1.05, floor=AlphaFloor(target=1.4, updates=4))
    head.set_num_updates(2)
    assert float(head.alpha_floor) == pytest.approx(1.205)
    assert bool((head() > 1.205).all())
    old = {"pre_alpha": torch.zeros(2), "initial_alpha": torch.full((2,), 1.3)}  # written before the floor
    head.load_state_dict(old)
    assert float(head.alpha_floor) == pytest.approx(1.01)
    torch.testing.assert_close(head(), torch.full((2,), 1.505))
    plain = HeadAlpha(2, init=1.05)
    plain.set_num_updates(100)  # no schedule: the floor stays
    assert float(plain.alpha_floor) == pytest.approx(1.01)
