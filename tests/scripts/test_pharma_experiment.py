"""The pharma APE experiment script end to end, at toy size on a slice of the real corpus."""

import re
import subprocess
import sys

import pytest

from fairseq_sparse.ape.ter import ape_scores
from tests.conftest import REPO, write_ape_split


def run_experiment(out, corpus, tiny_bert, epochs, *extra):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "pharma_ape_experiment.py"), "--out", str(out),
                           "--corpus", str(corpus), "--dev-size", "20", "--bert-model", str(tiny_bert),
                           "--bert-layers", "1", "--max-epoch", str(epochs), "--lr", "1e-3", "--warmup", "10",
                           *extra], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = (out / "results.md").read_text(encoding="utf-8")
    rows = {name: cells.split(" | ") for name, cells in re.findall(
        r"^\| (do nothing \(MT as is\)|bert_ape, \w+ initialisation) \| (.*) \|$", results, re.M)}
    return results, rows


def test_experiment_writes_bert_random_and_do_nothing_rows_and_resumes(tmp_path, tiny_bert):
    write_ape_split(tmp_path, "slice", 0, 220)
    out = tmp_path / "exp"
    results, rows = run_experiment(out, tmp_path / "slice", tiny_bert, epochs=1)
    assert "Train: 200 triplets; dev: the last 20. Trained (or resumed) in this run: bert, random;" in results
    assert "lowercased (uncased BERT)" in results
    assert set(rows) == {"do nothing (MT as is)", "bert_ape, bert initialisation", "bert_ape, random initialisation"}
    assert rows["do nothing (MT as is)"][2:] == ["0", "0", "0", "–", "–"], "doing nothing trains nothing"
    updates = {name: int(cells[5]) for name, cells in rows.items() if "initialisation" in name}
    assert min(updates.values()) > 0 and all(float(rows[name][6]) > 1 for name in updates)
    for name in updates:
        modified, improved, deteriorated = (int(x) for x in rows[name][2:5])
        assert 0 <= improved + deteriorated <= modified <= 20
    mt = (out / "data" / "test.mt").read_text(encoding="utf-8").lower().splitlines()
    pe = (out / "data" / "test.pe").read_text(encoding="utf-8").lower().splitlines()
    ter, _, bleu, _ = ape_scores(mt, pe)
    assert [float(x) for x in rows["do nothing (MT as is)"][:2]] == [pytest.approx(ter, abs=0.005),
                                                                     pytest.approx(bleu, abs=0.005)]
    assert "nrefs:1|case:mixed|tok:tercom" in results and "tok:none" in results
    # The authors' configuration is the default, for both systems alike.
    for system in ("bert", "random"):
        log = (out / system / "train.log").read_text(encoding="utf-8")
        assert "share_self_attn_with_encoder=True" in log
        assert "'_name': 'polynomial_decay', 'warmup_updates': 10, 'force_anneal': None, 'end_learning_rate': 0.0, " \
               "'power': 1.0, 'total_num_update': 50000.0" in log
        assert "'adam_betas': '(0.9, 0.999)', 'adam_eps': 1e-06, 'weight_decay': 0.01" in log
        assert "'clip_norm': 1.0" in log and "'update_freq': [2]" in log
    assert "decoder self-attention shared with the encoder's, at most 1 epoch or 50000 updates of 2 x 512 " \
           "tokens" in results

    # Run again with a longer budget for the BERT system only: it goes on from its last
    # checkpoint, so the second epoch adds as many updates as the first had (not a fresh
    # start); the random system is not trained again, and its row is scored from its
    # first run's post-edits, unchanged.
    first = rows
    results, rows = run_experiment(out, tmp_path / "slice", tiny_bert, 2, "--systems", "bert")
    assert "Trained (or resumed) in this run: bert;" in results
    assert "earlier run (see its train.log for its settings): random." in results
    assert int(rows["bert_ape, bert initialisation"][5]) == 2 * updates["bert_ape, bert initialisation"]
    assert rows["bert_ape, random initialisation"] == first["bert_ape, random initialisation"]


def test_linear_decay_without_an_end_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "pharma_ape_experiment.py"), "--out", str(tmp_path),
                           "--max-update", "0"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--lr-scheduler polynomial_decay decays to 0 at --max-update: give --max-update > 0" in proc.stderr
    assert not (tmp_path / "data").exists()
