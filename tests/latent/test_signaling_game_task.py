"""The signaling_game experiment through fairseq-train, and its games."""

import numpy as np
import pytest
import torch

from fairseq_sparse.latent import ESTIMATORS, Categorical
from fairseq_sparse.latent.estimators import EstimatorOptions, build_estimator_from_options
from fairseq_sparse.latent.signaling_game_model import SignalingGameModel
from fairseq_sparse.latent.signaling_game_task import SignalingGameDataset
from tests.conftest import REPO, run_cli, shared_data, valid_metrics

COMMON = ["--user-dir", REPO / "fairseq_sparse", "--task", "signaling_game", "--arch", "signaling_game",
          "--criterion", "latent_marginalization", "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "64",
          "--cpu", "--num-workers", "0", "--no-save", "--log-format", "simple"]
CATEGORICAL = sorted(name for name, cls in ESTIMATORS.items() if Categorical in cls.spaces)


def test_games_hold_the_target_once_among_distinct_candidates():
    features = torch.arange(40, dtype=torch.float32)[:, None]
    for fixed in (True, False):
        dataset = SignalingGameDataset(features, 16, seed=0, fixed=fixed)
        batch = dataset.collater([dataset[i] for i in range(40)])
        candidates = batch["net_input"]["candidates"][..., 0]
        rows = torch.arange(40)
        assert torch.equal(candidates[rows, batch["target_position"]], batch["net_input"]["target"][:, 0])
        assert all(len(set(row.tolist())) == 16 for row in candidates)
        positions = batch["target_position"].tolist()
        assert len(set(positions)) > 5  # the target is not always in the same place
    again = SignalingGameDataset(features, 16, seed=0, fixed=True)
    assert torch.equal(again.collater([again[i] for i in range(40)])["net_input"]["candidates"],
                       SignalingGameDataset(features, 16, seed=0, fixed=True).collater(
                           [again[i] for i in range(40)])["net_input"]["candidates"])
    with pytest.raises(ValueError, match="--num-candidates 16: this split has only 10 items"):
        SignalingGameDataset(features[:10], 16, seed=0, fixed=True)


def test_training_games_depend_on_epoch_and_target_only():
    """A training game is drawn afresh each epoch, the same whatever batch the target is in
    and however often the dataset is rebuilt (as a resumed run rebuilds it)."""
    features = torch.arange(40, dtype=torch.float32)[:, None]

    def candidates(dataset, ids):
        return dataset.collater([dataset[i] for i in ids])["net_input"]["candidates"]

    dataset = SignalingGameDataset(features, 16, seed=0, fixed=False)
    first = candidates(dataset, range(40))
    assert torch.equal(candidates(dataset, range(40)), first)
    rebuilt = SignalingGameDataset(features, 16, seed=0, fixed=False)
    assert torch.equal(candidates(rebuilt, [7, 3]), first[[7, 3]])
    dataset.set_epoch(2)
    second = candidates(dataset, range(40))
    assert sum(not torch.equal(a, b) for a, b in zip(first, second)) > 35
    rebuilt.set_epoch(2)
    assert torch.equal(candidates(rebuilt, range(40)), second)


def test_receiver_of_many_messages_per_game_matches_one_game_per_row():
    """The stacked receiver (dense decodes 256 messages per game) gives the scores and
    gradients of scoring each (game, message) row on its own copy of the candidates,
    whatever the order of the rows, with games that decode nothing and relaxed messages."""
    torch.manual_seed(0)
    model = SignalingGameModel(features=20, messages=12, hidden_dim=8).double()
    embedded = torch.randn(5, 4, 8, dtype=torch.double, requires_grad=True)
    rows = torch.tensor([3, 0, 0, 4, 3, 3, 1, 0])  # unsorted; game 2 decodes no message
    message = torch.softmax(torch.randn(8, 12, dtype=torch.double), -1).requires_grad_()
    stacked = model.receiver_scores_of_rows(embedded, rows, message)
    one_by_one = model.receiver_scores(embedded[rows], message)
    torch.testing.assert_close(stacked, one_by_one)
    weights = torch.randn_like(stacked)
    inputs = [embedded, message, model.message_embedding.weight]
    for got, want in zip(torch.autograd.grad((stacked * weights).sum(), inputs),
                         torch.autograd.grad((one_by_one * weights).sum(), inputs)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("estimator", ["dense", "sparsemax", "gumbel"])
def test_entropy_bonus_lowers_the_loss_by_the_senders_entropy(estimator):
    """--entropy-coeff c: loss = E[receiver loss] - c H(pi), the paper code's sender bonus."""
    torch.manual_seed(0)
    sample = {"net_input": {"target": torch.rand(6, 10), "candidates": torch.rand(6, 4, 10)},
              "target_position": torch.randint(4, (6,))}
    model = SignalingGameModel(features=10, messages=7, hidden_dim=5)
    with_bonus = SignalingGameModel(features=10, messages=7, hidden_dim=5, entropy_coeff=0.3)
    with_bonus.load_state_dict(model.state_dict())
    est = build_estimator_from_options(estimator, EstimatorOptions(), Categorical(7))
    torch.manual_seed(1)
    loss, stats = model.latent_loss(sample, est)
    torch.manual_seed(1)
    bonus, bonus_stats = with_bonus.latent_loss(sample, est)
    assert "sender_entropy" not in stats and bonus_stats["sender_entropy"] > 0
    torch.testing.assert_close(bonus, loss - 0.3 * bonus_stats["sender_entropy"])
    with pytest.raises(ValueError, match="--entropy-coeff -0.1: must be at least 0"):
        SignalingGameModel(features=10, messages=7, hidden_dim=5, entropy_coeff=-0.1)
    with pytest.raises(ValueError, match="--entropy-coeff nan"):
        SignalingGameModel(features=10, messages=7, hidden_dim=5, entropy_coeff=float("nan"))


def test_bounded_sender_scores_are_bounded_and_divided_by_its_temperature():
    """--sender bounded (the paper code's): each score is at most the L1 norm of its row of
    the output layer over the temperature, however large the input."""
    torch.manual_seed(0)
    model = SignalingGameModel(features=10, messages=7, hidden_dim=5, sender="bounded", sender_filters=3,
                               sender_temperature=10.0)
    scores = model(torch.randn(50, 10) * 1e4)
    bound = model.sender.output.weight.abs().sum(1) / 10.0
    assert bool((scores.abs() <= bound + 1e-6).all())
    hot = SignalingGameModel(features=10, messages=7, hidden_dim=5, sender="bounded", sender_filters=3,
                             sender_temperature=1.0)
    hot.load_state_dict(model.state_dict())
    x = torch.randn(4, 10)
    torch.testing.assert_close(hot(x) / 10.0, model(x))
    mlp = SignalingGameModel(features=10, messages=7, hidden_dim=5, sender_temperature=4.0)
    plain = SignalingGameModel(features=10, messages=7, hidden_dim=5)
    plain.load_state_dict(mlp.state_dict())
    torch.testing.assert_close(plain(x) / 4.0, mlp(x))
    for option, value, message in [("sender_temperature", 0.0, "--sender-temperature 0.0: must be above 0"),
                                   ("sender_filters", 0, "--sender-filters 0: must be at least 1"),
                                   ("sender", "cnn", "--sender cnn: must be mlp or bounded")]:
        with pytest.raises(ValueError, match=message):
            SignalingGameModel(features=10, messages=7, hidden_dim=5, **{option: value})


def test_resumed_run_plays_the_uninterrupted_runs_games(tmp_path):
    common = [*(a for a in COMMON if a != "--no-save"), "--estimator", "sparsemax", "--seed", "1",
              "--no-epoch-checkpoints"]
    run_cli("fairseq-train", *common, "--max-epoch", "2", "--save-dir", "straight", cwd=tmp_path)
    for epochs in ("1", "2"):
        run_cli("fairseq-train", *common, "--max-epoch", epochs, "--save-dir", "resumed", cwd=tmp_path)
    straight, resumed = (torch.load(tmp_path / run / "checkpoint_last.pt")["model"] for run in ("straight", "resumed"))
    for name, value in straight.items():
        assert torch.equal(value, resumed[name]), name


@pytest.mark.parametrize("estimator", CATEGORICAL)
def test_every_estimator_plays_on_digits(estimator, tmp_path):
    proc = run_cli("fairseq-train", *COMMON, "--estimator", estimator, "--max-update", "4",
                   "--summed" if estimator == "sum_and_sample" else "--topk", "5", cwd=tmp_path)
    metrics = valid_metrics(proc.stdout)
    assert 0 <= metrics["success"] <= 100
    calls = metrics["decoder_calls"]
    expected = {"dense": 256, "sfe": 1, "nvil": 1, "gumbel": 1, "st_gumbel": 1, "sfe_plus": 2, "sum_and_sample": 6,
                "unordered_set": 4}
    if estimator in expected:
        assert calls == expected[estimator]
    else:
        assert 1 <= calls <= (5 if estimator == "topk_sparsemax" else 256)


def test_sparse_marginalisation_beats_chance_with_few_calls(tmp_path):
    proc = run_cli("fairseq-train", *COMMON, "--estimator", "sparsemax", "--max-epoch", "8", cwd=tmp_path)
    metrics = valid_metrics(proc.stdout)
    assert metrics["success"] > 3 * 100 / 16 and metrics["decoder_calls"] < 10


def test_feature_file_and_its_errors(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "features.npy", rng.normal(size=(300, 12)).astype(np.float32))
    proc = run_cli("fairseq-train", *COMMON, "--features", tmp_path / "features.npy", "--estimator", "sparsemax",
                   "--max-update", "2", "--num-candidates", "8", cwd=tmp_path)
    assert "240 train / 30 valid / 30 test items of 12 features; 256 messages, 8 candidates" in proc.stdout
    bad = np.ones((50, 4), dtype=np.float32)
    bad[7, 2] = np.nan
    np.save(tmp_path / "bad.npy", bad)
    proc = run_cli("fairseq-train", *COMMON, "--features", tmp_path / "bad.npy", "--max-update", "1",
                   "--num-candidates", "2", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "bad.npy: row 7 is not finite" in proc.stderr
    np.save(tmp_path / "flat.npy", np.ones(10))
    proc = run_cli("fairseq-train", *COMMON, "--features", tmp_path / "flat.npy", "--max-update", "1", cwd=tmp_path,
                   check=False)
    assert proc.returncode != 0 and "expected a 2-d numeric array" in proc.stderr


def test_mnist_pixels_from_shared_data(tmp_path):
    mnist = shared_data("images", "mnist")
    proc = run_cli("fairseq-train", mnist, *COMMON, "--dataset", "mnist", "--estimator", "sparsemax",
                   "--max-update", "3", "--disable-validation", cwd=tmp_path)
    assert "8000 train / 1000 valid / 1000 test items of 784 features" in proc.stdout
