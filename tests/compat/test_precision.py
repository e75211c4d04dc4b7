"""``--amp`` on CPU: bfloat16 autocast for the training forward pass, float32 everywhere else
(fairseq_sparse/compat/precision.py)."""

import math
import re

import torch
from fairseq.optim.amp_optimizer import AMPOptimizer
from fairseq.tasks.fairseq_task import FairseqTask
from omegaconf import OmegaConf

import fairseq_sparse
from tests.conftest import APE_TRAIN, REPO, run_cli

fairseq_sparse.load_plugin()  # applies the fixes, this one included


class Probe(torch.autograd.Function):
    """Identity that records the dtype it sees forward and whether autocast is on backward."""
    seen = {}

    @staticmethod
    def forward(ctx, x):
        Probe.seen["forward"] = x.dtype
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        Probe.seen["backward_autocast"] = torch.is_autocast_enabled("cpu")
        return grad


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(16, 16)

    def set_num_updates(self, num_updates):
        pass

    def forward(self, x):
        return Probe.apply(self.linear(x))


def criterion(model, sample):
    loss = model(sample["x"]).float().pow(2).sum()
    return loss, 1, {"loss": loss.detach()}


def config(amp=True):
    return OmegaConf.create({"common": {"amp": amp, "cpu": True, "fp16_init_scale": 128, "amp_init_scale": 128,
                                        "amp_scale_window": None, "min_loss_scale": 1e-4},
                             "optimizer": {"_name": "sgd", "lr": [0.1], "momentum": 0.0, "weight_decay": 0.0}})


def amp_optimizer(model):
    return AMPOptimizer.build_optimizer(config(), list(model.parameters()))


def step(optimizer, model):
    sample = {"x": torch.linspace(-1, 1, 64).view(4, 16)}
    task = FairseqTask(None)
    return task.train_step(sample, model, criterion, optimizer, update_num=0)[0]


def test_amp_on_cpu_runs_the_forward_pass_in_bfloat16_and_the_backward_outside_autocast():
    model = Tiny()
    Probe.seen.clear()
    optimizer = amp_optimizer(model)
    loss = step(optimizer, model)
    assert Probe.seen == {"forward": torch.bfloat16, "backward_autocast": False}
    assert model.linear.weight.grad.dtype == torch.float32 and model.linear.weight.dtype == torch.float32
    # The gradient is the scaled float32 one, to bfloat16's rounding of the forward pass.
    reference = Tiny()
    exact = criterion(reference, {"x": torch.linspace(-1, 1, 64).view(4, 16)})[0]
    exact.backward()
    assert math.isclose(float(loss), float(exact), rel_tol=2e-2)
    scale = optimizer.scaler.get_scale()
    assert scale == 128
    torch.testing.assert_close(model.linear.weight.grad / scale, reference.linear.weight.grad, rtol=3e-2, atol=3e-2)


def test_without_amp_the_step_stays_float32():
    model = Tiny()
    Probe.seen.clear()
    from fairseq import optim

    step(optim.build_optimizer(config(amp=False).optimizer, list(model.parameters())), model)
    assert Probe.seen["forward"] == torch.float32


def test_amp_on_cpu_skips_a_step_whose_gradient_is_not_finite():
    """fairseq's CUDA scaler turns itself off without CUDA and would apply such a step."""
    model = Tiny()
    optimizer = amp_optimizer(model)
    assert isinstance(optimizer.scaler, torch.amp.GradScaler) and optimizer.scaler.is_enabled()
    before = model.linear.weight.detach().clone()
    optimizer.backward(model.linear.weight.sum() * float("inf"))
    assert not math.isfinite(float(optimizer.clip_grad_norm(0.0)))
    optimizer.step()
    assert torch.equal(model.linear.weight, before)
    assert optimizer.scaler.get_scale() == 64  # backed off, as on CUDA
    optimizer.zero_grad()
    step(optimizer, model)
    optimizer.step()
    assert not torch.equal(model.linear.weight, before)  # a finite step is applied


def test_amp_on_cpu_trains_from_the_cli(ape_raw, tiny_bert, tmp_path):
    proc = run_cli("fairseq-train", ape_raw, *APE_TRAIN, "--bert-model", tiny_bert, "--max-update", "6",
                   "--log-interval", "2", "--save-dir", tmp_path, "--amp")
    log = proc.stdout + proc.stderr
    assert "--amp on CPU: training's forward pass and loss under bfloat16 autocast" in log
    assert "Disabling autocast" not in log and "GradScaler is enabled, but CUDA is not available" not in log
    losses = [float(x) for x in re.findall(r"\| loss ([0-9.]+) \|", log)]
    assert losses and all(math.isfinite(x) for x in losses)
    assert re.search(r"loss_scale 128", log)
    assert (tmp_path / "checkpoint_last.pt").exists()


def test_amp_on_cpu_trains_an_alpha_entmax_transformer(multi30k_bin, tmp_path):
    """The sparse_transformer line's normalisers take bfloat16 scores (computed in float32 inside) and give
    finite losses and per-head alphas."""
    proc = run_cli("fairseq-train", multi30k_bin, "--user-dir", REPO / "fairseq_sparse", "--task", "translation",
                   "--arch", "entmax_transformer_tiny", "--attention-normalizer", "alpha_entmax",
                   "--output-normalizer", "sparsemax", "--criterion", "label_smoothed_entmax", "--label-smoothing",
                   "0.1", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500", "--cpu", "--seed", "3",
                   "--log-format", "simple", "--num-workers", "0", "--max-epoch", "2", "--save-dir", tmp_path, "--amp")
    log = proc.stdout + proc.stderr
    assert "--amp on CPU" in log
    losses = [float(x) for x in re.findall(r"valid on 'valid' subset \| loss ([0-9.]+) \|", log)]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses) and losses[1] < losses[0]
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    alphas = [v for k, v in state["model"].items() if "alpha" in k]
    assert alphas and all(torch.isfinite(v).all() for v in alphas)
