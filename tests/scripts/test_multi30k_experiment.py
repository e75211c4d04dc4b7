"""The Multi30k experiment script end to end, at toy size on a slice of the real data."""

import json
import re
import shutil

import torch

from tests.conftest import run_script


def test_experiment_writes_the_side_by_side_table(tmp_path, multi30k_prepared):
    # 12 test sentences: a model trained for two epochs translates each to the length limit.
    raw, data = multi30k_prepared
    out = tmp_path / "exp"
    proc = run_script("multi30k_sparse_attention.py", "--out", out, "--data", data / "bin",
                      "--max-epoch", "2", "--dim", "32", "--layers", "1", "--jobs", "3", "--test-prefix", raw / "val",
                      "--alpha-lr-scale", "5", "--speed-updates", "2", "--speed-rounds", "2", "--max-tokens", "2048")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = (out / "results.md").read_text()
    assert "sacrebleu signature: `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in results
    rows = re.findall(r"^\| (softmax|entmax15|alpha_entmax) \| ([0-9.]+) \| (\d+) \| ([0-9.]+) \(.*\| (.*) \| (.*) \| (.*) \|$",
                      results, re.M)
    assert [r[0] for r in rows] == ["softmax", "entmax15", "alpha_entmax"]
    assert [int(r[2]) for r in rows] == [2, 2, 2]
    assert float(rows[0][3]) == 1.0
    softmax_density = [float(x) for x in rows[0][4].split(" / ")]
    assert softmax_density == [1.0, 1.0, 1.0]
    assert all(0 < float(x) < 1 for x in rows[1][4].split(" / "))  # 1.5-entmax heads are sparse
    assert [float(x) for x in rows[1][5].split(" / ")] == [1.5, 1.5, 1.5]
    assert [float(x) for x in rows[1][6].split(" / ")] == [0, 0, 0]  # a fixed alpha does not move
    # Learned alphas may move (by little in this 2-epoch run, still in its warm-up), never past (1.01, 2).
    assert all(0 <= float(x) < 0.99 for x in rows[2][6].split(" / "))
    assert (out / "alpha_entmax_report" / "report.md").exists()
    # Updates and wall time; the extra test set scored from the same checkpoints; diversity per layer, every model.
    updates = re.findall(r"^\| (?:softmax|entmax15|alpha_entmax) \| [0-9.]+ \| 2 \| [0-9.]+ \([0-9]+ tok/s\) \| (\d+) \| "
                         r"([0-9.]+) min \|", results, re.M)
    assert len(updates) == 3 and len({u for u, _ in updates}) == 1 and int(updates[0][0]) > 0
    # Each model's best validation loss with its epoch, what ended it (two epochs: the epoch cap), and the curves.
    ended = re.findall(r"^\| (?:softmax|entmax15|alpha_entmax) \| .* min \| ([0-9.]+) \(([12])\) \| epoch cap \|",
                       results, re.M)
    assert len(ended) == 3 and all(0 < float(loss) < 14 for loss, _ in ended)
    assert (out / "validation_loss.png").stat().st_size > 5000 and "(validation_loss.png)" in results
    other = re.findall(r"^\| (softmax|entmax15|alpha_entmax) \| ([0-9.]+) \|$", results.split("other test sets")[1], re.M)
    assert [n for n, _ in other] == ["softmax", "entmax15", "alpha_entmax"] and all(float(b) >= 0 for _, b in other)
    diversity = re.findall(r"^\| (encoder|decoder|cross) \| 0 \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$",
                           results.split("Head diversity per layer")[1], re.M)
    assert [d[0] for d in diversity] == ["encoder", "decoder", "cross"]
    assert all(0 <= float(x) <= 1.3863 for d in diversity for x in d[1:])  # log 4 heads
    # The alpha-entmax report: trajectories from update 0 through both epoch checkpoints,
    # histograms with their bimodality, diversity and head roles.
    report_dir = out / "alpha_entmax_report"
    report = (report_dir / "report.md").read_text()
    for png in ("alpha_trajectories", "alpha_histogram", "diversity"):
        assert (report_dir / f"{png}.png").stat().st_size > 5000, png
    trajectory = report.split("## Alpha trajectories")[1].split("## ")[0]
    assert [int(u) for u in re.findall(r"^\| (\d+) \|", trajectory, re.M)][0] == 0
    assert len(re.findall(r"^\| (\d+) \|", trajectory, re.M)) == 3
    assert "bimodality coefficient" in report and "| role | site, layer | head | score |" in report
    # --alpha-lr-scale reached the alpha-entmax model and --max-tokens every model; tokens/s
    # measured apart, each model alone.
    cfgs = {n: torch.load(out / n / "checkpoint_last.pt", weights_only=False)["cfg"]
            for n in ("softmax", "entmax15", "alpha_entmax")}
    assert {cfg["dataset"]["max_tokens"] for cfg in cfgs.values()} == {2048}
    assert "sentencepiece 8k, 2048 tokens a batch;" in results
    model_cfg = cfgs["alpha_entmax"]["model"]
    assert model_cfg.alpha_lr_scale == 5.0  # a namespace: fairseq keeps a --user-dir architecture's options so
    speed = json.loads((out / "speed.json").read_text())
    assert speed["settings"] == {"updates": 2, "rounds": 2, "normalizers": ["softmax", "entmax15", "alpha_entmax"]}
    assert all(len(v) == 2 and min(v) > 0 for v in speed["tokens_per_second"].values())
    assert "Tokens/s: each model alone for 2 updates from its initialisation, median of 2 rounds." in results
    # How far Adam let the alphas move, per epoch checkpoint: never past the summed learning rate.
    number = r"([0-9.]+(?:e-[0-9]+)?)"
    reach = re.findall(rf"^\| (\d) \| (\d+) \| {number} \| {number} \(([0-9.]+) of the bound\) \| {number} "
                       r"\| (\d+) of 12 \|$",
                       results.split("How far the alphas could move")[1], re.M)
    assert [int(r[0]) for r in reach] == [1, 2] and int(reach[1][1]) > int(reach[0][1])
    assert all(0 < float(r[3]) <= 1.01 * float(r[2]) and float(r[5]) <= float(r[3]) for r in reach)


def test_missing_references_are_named_before_any_training(tmp_path, multi30k_prepared):
    """It trained every model, then failed with a traceback."""
    shutil.copytree(multi30k_prepared[1], tmp_path / "data")
    (tmp_path / "data" / "test.raw.de").unlink()
    out = tmp_path / "exp"
    proc = run_script("multi30k_sparse_attention.py", "--out", out, "--data", tmp_path / "data" / "bin",
                      "--max-epoch", "1", "--dim", "32", "--layers", "1")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"no raw test references {tmp_path / 'data' / 'test.raw.de'}" in proc.stderr
    assert not any(out.iterdir()), "nothing was trained"
