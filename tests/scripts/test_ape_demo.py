"""The README's main job (scripts/ape_demo.py) end to end, shortened to one epoch and one layer."""

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_main_job_post_edits_and_reports(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "ape_demo.py"), "--workdir", str(tmp_path),
                           "--max-epoch", "1", "--bert-layers", "1"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "GENERATED corpus (not real data)" in out
    assert re.search(r"TER = [0-9.]+ \(signature: nrefs:1\|case:mixed\|tok:tercom", out)
    assert re.search(r"do-nothing \(MT\)\s+11\.03\s+73\.10", out)  # the baseline of the generated test split
    assert re.search(r"post-edited\s+[0-9.]+\s+[0-9.]+", out)
    alpha_rows = re.findall(r"^\s+(encoder|decoder|cross)\s+0\s+((?:[12]\.\d{3}\s+){12})", out, re.M)
    assert {site for site, _ in alpha_rows} == {"encoder", "decoder", "cross"}
    assert all(1.0 < float(a) <= 2.0 for _, row in alpha_rows for a in row.split())
    # Under each layer, how far training moved each head from its initial alpha; the summary's bound is their maximum.
    changes = re.findall(r"^\s+change\s+((?:[-+]\d\.\d{3}\s+){12})", out, re.M)
    assert len(changes) == len(alpha_rows)
    moved = float(re.search(r"in \d+ updates training moved none by more than (\d\.\d{3})", out).group(1))
    assert max(abs(float(c)) for row in changes for c in row.split()) == pytest.approx(moved, abs=1e-3)
    assert (tmp_path / "checkpoints" / "checkpoint_best.pt").exists()
