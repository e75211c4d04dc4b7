"""scripts/tune_ape_decoding.py: the grid it simulates is what the gate does."""

import json
import sys

import fairseq_sparse
fairseq_sparse.load_plugin()
from fairseq_sparse.ape.postedit import PostEditor  # noqa: E402
from tests.conftest import REPO, run_script  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
import tune_ape_decoding as tuning  # noqa: E402


def test_the_grid_is_what_generation_with_those_values_gives(tmp_path, ape_trained):
    ape_raw, checkpoint = ape_trained
    out = tmp_path / "tuning"
    proc = run_script("tune_ape_decoding.py", "--path", checkpoint,
                      "--data", ape_raw, "--out", out, "--conservativeness", "0", "1.5", "--beam", "2",
                      "--max-len-b", "30", "--keep-mt-margin", "off", "-1", "0", "0.5", "inf",
                      "--keep-mt-risk", "0", "5", "inf")
    assert proc.returncode == 0, proc.stderr[-3000:]
    chosen = json.loads((out / "chosen.json").read_text())
    grid = [line.split("\t") for line in (out / "grid.tsv").read_text().splitlines()]
    assert grid[0] == ["C", "M", "R", "TER", "BLEU", "modified", "improved", "deteriorated", "kept"]
    assert len(grid) == 1 + 2 * (5 + 3)
    assert (out / "tuning.png").stat().st_size > 10_000 and "Chosen: C = " in (out / "grid.md").read_text()
    assert chosen["split"] == "valid" and chosen["max_len_b"] == 30 and "keep_mt_risk" in chosen
    # M = inf and R = inf keep every MT: doing nothing, whatever C.
    for row in grid[1:]:
        if "inf" in row[1:3]:
            assert row[3] == f"{chosen['do_nothing_ter']:.2f}" and row[5] == "0" and row[8] == "30"
    # The simulated grid cell equals real generation with the gate at that C and M.
    texts = tuning.read_triplets(ape_raw, "valid")
    models, task = tuning.load(checkpoint, ape_raw, "cpu")
    edits = tuning.beam_pass(models, task, 1.5, texts["src"], texts["mt"], beam=2, max_len_b=30)
    for margin in (-1.0, 0.0, 0.5):
        simulated, kept = tuning.gated(edits, texts["mt"], margin)
        real = PostEditor(models, task, beam=2, max_len_b=30, conservativeness=1.5,
                          keep_mt_margin=margin).postedits(texts["src"], texts["mt"])
        assert [e.text for e in real] == simulated and sum(e.is_mt for e in real) == kept
    weighed = tuning.candidate_risks(edits)
    for risk in (0.0, 5.0):
        simulated, kept = tuning.risk_gated(weighed, texts["mt"], risk)
        real = PostEditor(models, task, beam=2, max_len_b=30, conservativeness=1.5,
                          keep_mt_risk=risk).postedits(texts["src"], texts["mt"])
        assert [e.text for e in real] == simulated and sum(e.is_mt for e in real) == kept
    spread = [e.score - e.mt_score for e in edits]
    assert min(spread) < 0.5 < max(spread) or min(spread) < -1 < max(spread), "the margins tried split the dev set"


def test_bad_grid_values_are_named(tmp_path):
    for option, value, message in (("--keep-mt-margin", "nan", "--keep-mt-margin nan: must be a number"),
                                   ("--keep-mt-margin", "big", "--keep-mt-margin big: not a number or 'off'"),
                                   ("--conservativeness", "-2", "--conservativeness -2.0: must be a number >= 0"),
                                   ("--keep-mt-risk", "-1", "--keep-mt-risk -1.0: must be a number >= 0"),
                                   ("--keep-mt-risk", "lots", "--keep-mt-risk lots: not a number")):
        proc = run_script("tune_ape_decoding.py", "--path", "x", "--data",
                          tmp_path, "--out", tmp_path / "o", option, value)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]


def test_the_risk_gate_is_tried_only_when_asked():
    assert tuning.risk_grid(None) == [], "left out: the margin gate alone, as before the risk gate"
    assert tuning.risk_grid([]) == tuning.DEFAULT_RISKS, "the option alone: the default limits"
    assert tuning.risk_grid(["0", "2.5", "inf"]) == [0.0, 2.5, float("inf")]
