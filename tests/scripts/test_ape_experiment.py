"""The APE experiment script end to end, at toy size on a slice of the real corpus:
three systems trained, C and the gates (M, R) tuned on dev, the test split reported, resumed
(one system as an ensemble of two seeds)."""

import json
import re

import pytest

from fairseq_sparse.ape.bert_dictionary import model_spelling
from fairseq_sparse.ape.ter import ape_scores
from fairseq_sparse.modules.bert import load_bert_tokenizer
from tests.ape.test_task import generate, hypotheses
from tests.conftest import run_script, write_ape_split


LABELS = ("dual_source_transformer", "bert_ape, random initialisation", "bert_ape, BERT initialisation")


def run_experiment(out, corpus, tiny_bert, updates, *extra):
    proc = run_script("ape_experiment.py", "--out", out, "--corpus", corpus, "--held-out", "20", "--bert-model",
                      tiny_bert, "--bert-layers", "1", "--dual-source-layers", "1", "--dual-source-dim", "32",
                      "--max-update", updates, "--lr", "1e-3", "--warmup", "2", "--beam", "2", "--max-len-b", "30",
                      "--conservativeness", "0", "2", "--keep-mt-margin", "off", "0", "inf", "--keep-mt-max-edits",
                      "off", "1", *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = (out / "results.md").read_text(encoding="utf-8")
    rows = {name: cells.split(" | ") for name, cells in re.findall(r"^\| ([^|]+?) \| (\d.*) \|$", results, re.M)}
    return results, rows


def test_experiment_tunes_on_dev_reports_test_and_resumes(tmp_path, tiny_bert):
    write_ape_split(tmp_path, "slice", 0, 240)
    out = tmp_path / "exp"
    results, rows = run_experiment(out, tmp_path / "slice", tiny_bert, 6)
    assert "Train 200 triplets, dev 20 (the 20 before the last 20), test 20 (the last)." in results
    assert "on the uncased BERT's spelling" in results
    assert "do nothing (MT as is)" in rows
    for label in LABELS:
        assert f"{label}, plain beam search" in rows
        tuned = [name for name in rows if name.startswith(f"{label}, C = ")]
        assert sum(name.endswith("(chosen on dev)") for name in tuned) == 1
        # The gates not chosen are reported too, at their own best on dev (unless the same setting).
        assert len(tuned) <= 4 and all("best on dev, not chosen" in name for name in tuned
                                      if not name.endswith("(chosen on dev)"))
    # Doing nothing, on the spelling every row is scored on.
    data = out / "data"
    tokenizer = load_bert_tokenizer(data / "tokenizer")
    mt, pe = (model_spelling(tokenizer, (data / f"test.{f}").read_text(encoding="utf-8").splitlines())
              for f in ("mt", "pe"))
    ter, _, bleu, _ = ape_scores(mt, pe)
    assert [float(x) for x in rows["do nothing (MT as is)"][:2]] == [pytest.approx(ter, abs=0.005),
                                                                     pytest.approx(bleu, abs=0.005)]
    assert rows["do nothing (MT as is)"][2:] == ["0", "0", "0", "–", "–", "–", "–", "–"]
    for system in ("dual_source", "random", "bert"):
        chosen = json.loads((out / system / "tuning" / "chosen.json").read_text())
        assert chosen["split"] == "valid" and chosen["conservativeness"] in (0, 2)
        assert (out / system / "tuning" / "tuning.png").stat().st_size > 10_000
        grid = (out / system / "tuning" / "grid.tsv").read_text().splitlines()
        assert len(grid) == 1 + 2 * (3 + 1), "every C x M (x E where M is finite)"
        assert min(float(line.split("\t")[3]) for line in grid[1:]) == pytest.approx(chosen["ter"], abs=0.005)
        done = json.loads((out / system / "test" / "results.json").read_text())
        assert done["split"] == "test" and done["trained"]["updates"] == 6 and done["trained"]["tokens"] > 0
        assert set(chosen["by_gate"]) == {"none", "margin", "margin_edits"}
        for name in done["runs"]:
            assert len((out / system / "test" / f"{name}.txt").read_text(encoding="utf-8").splitlines()) == 20
        assert {"plain", "tuned"} <= set(done["runs"]) <= {"plain", "tuned", "best_margin", "best_margin_edits"}
    for name, cells in rows.items():
        if name != "do nothing (MT as is)":
            modified, improved, deteriorated, kept = (int(x) for x in cells[2:6])
            assert 0 <= improved + deteriorated <= modified <= 20 and modified + kept <= 20
            assert cells[6] == "6" and "CPU" in cells[9]

    # Resumed to twice the budget for one system, as an ensemble of two: seed 1 goes on from its
    # last checkpoint, seed 2 (in bert/seed-2) trains beside it, and the test split is post-edited
    # by their ensemble, as fairseq-generate --path a.pt:b.pt does; the others keep the rows
    # their earlier run left.
    first = rows
    first_log = (out / "bert" / "train.log").read_text()
    results, rows = run_experiment(out, tmp_path / "slice", tiny_bert, 12, "--systems", "bert", "--seeds", "2")
    members = [out / "bert", out / "bert" / "seed-2"]
    trained = [json.loads((save / "trained.json").read_text()) for save in members]
    assert [t["updates"] for t in trained] == [12, 12]
    # The resumed member's log keeps the first run's epochs and goes on from its checkpoint.
    log = (out / "bert" / "train.log").read_text()
    assert log.startswith(first_log) and "Loaded checkpoint" in log[len(first_log):]
    for seed, save in enumerate(members, 1):
        assert f"'seed': {seed}," in (save / "train.log").read_text()
    paths = ":".join(str(save / "checkpoint_last.pt") for save in members)
    assert json.loads((out / "bert" / "tuning" / "chosen.json").read_text())["checkpoint"] == paths
    bert = [name for name in rows if name.startswith("bert_ape, BERT")]
    assert bert and all(name.startswith("bert_ape, BERT initialisation, ensemble of 2, ") for name in bert)
    assert all(rows[name][6] == "12" and rows[name][7] == f"{sum(t['tokens'] for t in trained) / 1e6:.2f}M"
               for name in bert)
    assert re.fullmatch(r"CPU \(.+, \d+ threads a member\)", trained[1]["device"]), trained[1]["device"]
    assert "An ensemble's updates are each member's, its target tokens all members' together" in results
    generated = hypotheses(generate(out / "data", paths).stdout)
    mts = (out / "data" / "test.mt").read_text(encoding="utf-8").splitlines()
    outputs = (out / "bert" / "test" / "plain.txt").read_text(encoding="utf-8").splitlines()
    edited = [i for i, (o, m) in enumerate(zip(outputs, mts)) if o != m]  # where the MT is kept, its own text
    assert edited and all(outputs[i] == generated[i] for i in edited)
    for name in rows:
        if name.startswith(("dual_source", "bert_ape, random")):
            assert rows[name] == first[name]


def test_linear_decay_without_an_end_is_refused(tmp_path):
    proc = run_script("ape_experiment.py", "--out", tmp_path, "--max-update", "0")
    assert proc.returncode == 2
    assert "--lr-scheduler polynomial_decay decays to 0 at --max-update: give --max-update > 0" in proc.stderr
    assert not (tmp_path / "data").exists()


def test_training_cap_stops_early_and_is_recorded(tmp_path, tiny_bert):
    """--stop-time-hours (a leased GPU's time) stops training after the update that passes it,
    saves there, and the table reports the updates actually made."""
    write_ape_split(tmp_path, "slice", 0, 240)
    out = tmp_path / "capped"
    _, rows = run_experiment(out, tmp_path / "slice", tiny_bert, 50, "--systems", "bert",
                             "--stop-time-hours", "1e-9")
    assert json.loads((out / "bert" / "trained.json").read_text())["updates"] == 1
    assert all(cells[6] == "1" for name, cells in rows.items() if name.startswith("bert_ape"))
    log = (out / "bert" / "train.log").read_text()
    assert "'stop_time_hours': 1e-09" in log
    # A schedule not sized by the probe saves at every epoch's end and every 250 updates.
    assert "'save_interval_updates': 250," in log and "'save_interval': 1," in log


@pytest.mark.parametrize("options, message", [
    (["--max-update", "auto"], "--max-update auto sizes the schedule to the time cap: give --stop-time-hours > 0"),
    (["--max-update", "many"], "'many': a number of updates or 'auto'"),
    (["--warmup", "110%"], "'110%': a number of updates, or a percentage of them such as 10%"),
    (["--warmup", "-3"], "'-3': a number of updates, or a percentage of them such as 10%"),
    (["--tf32"], "--tf32 (tensor-core float32 products) needs --device cuda"),
    (["--seeds", "0"], "--seeds 0: at least 1"),
    (["--max-update", "auto", "--stop-time-hours", "1", "--probe-updates", "9"], "--probe-updates 9: at least 10"),
])
def test_bad_budget_options_are_refused_before_anything_runs(tmp_path, options, message):
    proc = run_script("ape_experiment.py", "--out", tmp_path, *options)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "data").exists()


def test_auto_budget_fits_the_schedule_to_the_time_cap(tmp_path, tiny_bert):
    """--max-update auto: a probe measures updates/s, the linear decay is sized to 90% of the
    cap, --warmup 10% is a tenth of that, and a resumed run keeps the schedule."""
    # 40 training triplets in batches of 2,048 tokens: an epoch of one or two updates, so that the
    # cap's run spans several epochs however slowly a loaded machine trains (at 200 triplets and
    # 512 tokens an epoch took 16 updates, more than a probe at 1 update/s grants).
    write_ape_split(tmp_path, "slice", 0, 80)
    out = tmp_path / "auto"
    cap = 2e-3  # hours: 7.2 s of training
    quick = ("--conservativeness", "0", "--keep-mt-margin", "off",  # one dev pass: tuning is tested above
             "--max-tokens", "2048")
    run_experiment(out, tmp_path / "slice", tiny_bert, "auto", "--systems", "bert", "--stop-time-hours", str(cap),
                   "--warmup", "10%", "--probe-updates", "20", *quick)
    trained = json.loads((out / "bert" / "trained.json").read_text())
    rate = trained["probe_updates_per_second"]
    assert rate > 0 and trained["max_update"] == max(1, int(rate * cap * 3600 * 0.9))
    probe_log = (out / "bert" / "probe" / "train.log").read_text()
    assert "'max_update': 20" in probe_log and "'no_save': True" in probe_log
    assert not list((out / "bert" / "probe").glob("*.pt")), "the probe saves nothing"
    log = (out / "bert" / "train.log").read_text()
    assert f"'total_num_update': '{trained['max_update']}'" in log or \
        f"'total_num_update': {trained['max_update']}" in log
    assert f"'warmup_updates': {round(trained['max_update'] / 10)}" in log
    assert 1 <= trained["updates"] <= trained["max_update"]
    # Saves and validations on the probe's clock, not at every epoch's end: here the interval
    # outlasts the run, so training, over several epochs, validates and saves once, where it stops.
    interval = max(1, round(rate * 90))
    assert f"'save_interval_updates': {interval}," in log and "'save_interval': 1000000," in log
    assert "'validate_interval': 1000000," in log
    epochs = re.findall(r"end of epoch (\d+)", log)
    if interval > trained["updates"]:
        assert len(epochs) > 1, "the toy run spans several epochs"
        assert log.count('begin validation on "valid" subset') == 1 and log.count("Saved checkpoint") == 1

    # Resumed with another cap: the schedule sized by the first run stays.
    run_experiment(out, tmp_path / "slice", tiny_bert, "auto", "--systems", "bert", "--stop-time-hours", "1",
                   "--warmup", "10%", *quick)
    again = json.loads((out / "bert" / "trained.json").read_text())
    assert again["max_update"] == trained["max_update"] and again["updates"] == trained["max_update"]


def test_the_conversion_recipe_reaches_fairseq_train_and_is_checked_first(tmp_path):
    from fairseq_sparse.ape import experiment_wmt

    config = experiment_wmt.APEExperimentConfig(out=tmp_path, bert_model="b", attention_normalizer="alpha_entmax",
                                            alpha_init="1.05", alpha_floor=1.5, alpha_floor_updates=300)
    command = [str(x) for x in experiment_wmt.fairseq_train("bert", tmp_path, config, tmp_path / "save", 1000, 100)]
    at = command.index("--alpha-floor")
    assert command[at:at + 4] == ["--alpha-floor", "1.5", "--alpha-floor-updates", "300"]
    assert command[command.index("--alpha-init") + 1] == "1.05"
    assert "--alpha-floor" not in [str(x) for x in experiment_wmt.fairseq_train(
        "bert", tmp_path, experiment_wmt.APEExperimentConfig(out=tmp_path, bert_model="b"), tmp_path, 1000, 100)]
    for options, message in ((["--alpha-floor", "1.5"], "needs --attention-normalizer alpha_entmax"),
                             (["--attention-normalizer", "alpha_entmax", "--alpha-floor", "2.5"],
                              "--alpha-floor must lie in")):
        proc = run_script("ape_experiment.py", "--out", tmp_path, *options)
        assert proc.returncode == 2 and message in proc.stderr
        assert not (tmp_path / "data").exists()
