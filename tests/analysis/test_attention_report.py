"""The report command end to end on a trained tiny entmax_transformer."""

import re

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
    for png in ["alpha_per_head", "alpha_histogram", "alpha_trajectories", "density", "diversity",
                "attention_0_encoder0", "attention_1_cross1"]:
        assert (out / f"{png}.png").stat().st_size > 5000, png
    report = (out / "report.md").read_text()
    alpha_rows = re.findall(r"^\| (encoder|decoder|cross) \| (\d) \| ([0-9. |]+)$", report.split("## Attention density")[0], re.M)
    assert len(alpha_rows) == 6
    for _, _, cells in alpha_rows:
        assert all(1.01 <= float(x) <= 2.0 for x in cells.split("|") if x.strip())
    assert "## Head roles" in report and "## Alpha trajectories" in report


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
