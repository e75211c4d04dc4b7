"""The report command end to end on a trained tiny entmax_transformer."""

import re

import pytest
import torch

import fairseq_sparse  # noqa: F401  (allow-lists what fairseq checkpoints hold for torch.load)

from tests.conftest import REPO, run_cli

USER_DIR = str(REPO / "fairseq_sparse")


def test_report_from_checkpoints(multi30k_bin, tmp_path):
    run_cli("fairseq-train", multi30k_bin, "--user-dir", USER_DIR, "--task", "translation",
            "--arch", "entmax_transformer_tiny", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
            "--cpu", "--seed", "2", "--max-epoch", "2", "--save-dir", tmp_path / "ck", "--num-workers", "0")
    out = tmp_path / "report"
    run_cli("fairseq-sparse-attention-report", "--path", tmp_path / "ck" / "checkpoint_last.pt", "--data", multi30k_bin,
            "--out", out, "--sentences", "0", "1", "--trajectory", tmp_path / "ck" / "checkpoint1.pt",
            tmp_path / "ck" / "checkpoint2.pt")
    for png in ["alpha_per_head", "alpha_change", "alpha_histogram", "alpha_trajectories", "density", "diversity",
                "attention_0_encoder0", "attention_1_cross1"]:
        assert (out / f"{png}.png").stat().st_size > 5000, png
    report = (out / "report.md").read_text()
    learned_md, change_md = report.split("## Attention density")[0].split("Change since initialisation")
    learned, change = heads_table(learned_md), heads_table(change_md)
    assert len(learned) == 6 and set(change) == set(learned)
    # Learned minus change is the initial alpha the checkpoint keeps.
    state = torch.load(tmp_path / "ck" / "checkpoint_last.pt")["model"]
    for (site, layer), values in learned.items():
        assert all(1.01 <= x <= 2.0 for x in values)
        owner = {"encoder": f"encoder.layers.{layer}.self_attn", "decoder": f"decoder.layers.{layer}.self_attn",
                 "cross": f"decoder.layers.{layer}.encoder_attn"}[site]
        initial = state[f"{owner}.head_alpha.initial_alpha"].tolist()
        assert [a - c for a, c in zip(values, change[(site, layer)])] == pytest.approx(initial, abs=2e-3)
    assert "## Head roles" in report
    trajectory = report.split("## Alpha trajectories")[1]
    assert [int(u) for u in re.findall(r"^\| (\d+) \|", trajectory, re.M)][:2] == [0, updates(tmp_path / "ck" / "checkpoint1.pt")]


def heads_table(markdown):
    """{(site, layer): value per head} of a report table, its mean column left out."""
    rows = re.findall(r"^\| (encoder|decoder|cross) \| (\d) \| ([-+0-9. |]+)$", markdown, re.M)
    return {(s, int(i)): [float(x) for x in cells.split("|") if x.strip()][:-1] for s, i, cells in rows}


def updates(checkpoint):
    return torch.load(checkpoint)["optimizer_history"][-1]["num_updates"]


def test_report_rejects_a_missing_checkpoint(tmp_path):
    proc = run_cli("fairseq-sparse-attention-report", "--path", tmp_path / "nope.pt", "--data", tmp_path,
                   "--out", tmp_path / "r", check=False)
    assert proc.returncode != 0 and "checkpoint not found" in proc.stderr


def test_report_rejects_a_stock_transformer(multi30k_bin, tmp_path):
    run_cli("fairseq-train", multi30k_bin, "--user-dir", USER_DIR, "--task", "translation", "--arch", "transformer_tiny",
            "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--cpu", "--max-epoch", "1",
            "--save-dir", tmp_path / "ck", "--num-workers", "0")
    proc = run_cli("fairseq-sparse-attention-report", "--path", tmp_path / "ck" / "checkpoint_last.pt",
                   "--data", multi30k_bin, "--out", tmp_path / "r", check=False)
    assert proc.returncode != 0 and "not an entmax_transformer checkpoint" in proc.stderr
