"""fairseq checkpoints a criterion's state only when it has parameters; the plugin also
keeps the buffers of one without (the estimators' baselines and Gumbel step), so a
resumed run continues the interrupted one exactly."""

import pytest
import torch

import fairseq_sparse
fairseq_sparse.load_plugin()  # applies the fix; allow-lists what fairseq checkpoints hold
from tests.conftest import REPO, run_cli

COMMON = ["--user-dir", REPO / "fairseq_sparse", "--task", "ssvae", "--arch", "ssvae",
          "--criterion", "latent_marginalization", "--dataset", "digits", "--optimizer", "adam", "--lr", "1e-3",
          "--batch-size", "64", "--seed", "1", "--cpu", "--num-workers", "0", "--no-epoch-checkpoints",
          "--log-format", "simple"]


def train(save_dir, estimator, epochs, cwd):
    return run_cli("fairseq-train", *COMMON, "--estimator", estimator, "--max-epoch", epochs, "--save-dir", save_dir,
                   cwd=cwd)


@pytest.mark.parametrize("estimator, buffers", [("sfe", {"estimator.baseline.value", "estimator.baseline.steps"}),
                                                ("gumbel", {"estimator.step"})])
def test_resumed_run_ends_where_the_uninterrupted_one_does(estimator, buffers, tmp_path):
    train("straight", estimator, 2, tmp_path)
    train("resumed", estimator, 1, tmp_path)
    interrupted = torch.load(tmp_path / "resumed" / "checkpoint_last.pt")["extra_state"]["criterion_buffers"]
    assert set(interrupted) == buffers and int(interrupted[next(k for k in buffers if "step" in k)]) > 0
    train("resumed", estimator, 2, tmp_path)
    straight, resumed = (torch.load(tmp_path / run / "checkpoint_last.pt") for run in ("straight", "resumed"))
    for name, value in straight["model"].items():
        assert torch.equal(value, resumed["model"][name]), name
    for name, value in straight["extra_state"]["criterion_buffers"].items():
        assert torch.equal(value, resumed["extra_state"]["criterion_buffers"][name]), name


def test_checkpoint_without_the_buffers_resumes_with_a_warning(tmp_path):
    train("old", "sfe", 1, tmp_path)
    path = tmp_path / "old" / "checkpoint_last.pt"
    state = torch.load(path)
    del state["extra_state"]["criterion_buffers"]  # as checkpoints written before the fix
    torch.save(state, path)
    proc = train("old", "sfe", 2, tmp_path)
    assert "holds no criterion state: the buffers of LatentMarginalizationCriterion" in proc.stdout + proc.stderr
    assert int(torch.load(path)["extra_state"]["criterion_buffers"]["estimator.baseline.steps"]) > 0
