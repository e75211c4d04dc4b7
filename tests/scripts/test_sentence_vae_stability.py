"""scripts/sentence_vae_stability.py on a small slice of real Yelp text: the table, the plot,
and logs collected rather than rerun on a second call."""

import json
import subprocess
import sys

from tests.conftest import REPO, shared_data


def run(data, out):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "sentence_vae_stability.py"), str(data), "--out",
                           str(out), "--seeds", "2", "--epochs", "2", "--hsvae-settings", "10,1", "--mat-vae-settings",
                           "1,1", "--latent-dim", "6", "--embed-dim", "16", "--hidden-dim", "32", "--jobs", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_stability_grid(tmp_path):
    yelp = shared_data("text", "yelp5")
    data = tmp_path / "yelp"
    data.mkdir()
    lines = (yelp / "valid.txt").read_text(encoding="utf-8").splitlines()
    for split, part in (("train", lines[:200]), ("valid", lines[200:260]), ("test", lines[260:320])):
        (data / f"{split}.txt").write_text("\n".join(part) + "\n", encoding="utf-8")
    out = tmp_path / "stability"
    proc = run(data, out)
    assert "| hsvae | (10.0, 1.0) |" in proc.stdout and "| mat_vae | (1.0, 1.0) |" in proc.stdout
    results = json.loads((out / "stability.json").read_text())
    runs = results["hsvae"]["10,1"]
    assert len(runs) == 2 and len(runs[0]) == 2 and 0 <= runs[0][-1]["average_hoyer"] <= 1
    assert (out / "stability.png").stat().st_size > 10000
    logs = sorted((out / "logs").rglob("*.log"))
    stamps = [p.stat().st_mtime_ns for p in logs]
    assert run(data, out).stdout == proc.stdout and [p.stat().st_mtime_ns for p in logs] == stamps
