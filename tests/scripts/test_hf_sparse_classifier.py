"""The Hugging Face classifier comparison and its benchmark end to end, at toy size (a tiny
random BERT, a few DBpedia-14 sentences of each class)."""

import dataclasses
import json
import re

import pytest
import torch

from tests.conftest import run_script, shared_data


def test_the_comparison_writes_its_table_and_alpha_figures_and_resumes(tmp_path, tiny_bert):
    data = shared_data("text", "hsvae-dbpedia14")
    out = tmp_path / "hf"
    options = ["--out", out, "--data", data, "--bert-model", tiny_bert, "--train-per-class", "2", "--dev-per-class",
               "1", "--updates", "3", "--eval-every", "1", "--batch-size", "4", "--max-test", "28",
               "--alpha-floor", "1.6", "--alpha-floor-updates", "2"]
    proc = run_script("hf_sparse_classifier.py", *options)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())["runs"]
    assert list(results) == ["softmax", "entmax15", "alpha_near1", "alpha_random", "recipe"]
    assert all(list(by_seed) == ["1"] for by_seed in results.values())
    results = {run: by_seed["1"] for run, by_seed in results.items()}
    assert results["softmax"]["density"] == [1.0, 1.0]
    # One density per layer; a random 32-wide BERT's scores are too flat for zeros (test_hf checks those).
    assert all(len(results[run]["density"]) == 2 and all(0 < d <= 1 for d in results[run]["density"])
               for run in results)
    assert [e["update"] for e in results["entmax15"]["log"]] == [1, 2, 3]
    for run in ("alpha_near1", "alpha_random", "recipe"):
        assert (out / f"alphas_{run}_seed1.png").stat().st_size > 5000
        assert all(len(layer) == 4 for layer in results[run]["alpha"])  # tiny_bert: 2 layers of 4 heads
    start = [a - c for layer, moved in zip(results["alpha_near1"]["alpha"], results["alpha_near1"]["alpha_change"])
             for a, c in zip(layer, moved)]
    assert start == pytest.approx([1.05] * 8, abs=1e-5), "alpha_near1 starts every head at --near-one"
    # The recipe's checkpoint is one at the floor's target: every head at 1.6 or above.
    assert min(a for layer in results["recipe"]["alpha"] for a in layer) >= 1.6 - 1e-6
    assert max(a for layer in results["alpha_near1"]["alpha"] for a in layer) < 1.2
    table = (out / "results.md").read_text()
    assert all(len(results[run]["dev_density"]) == 2 and all(0 < d <= 1 for d in results[run]["dev_density"])
               for run in results)
    assert re.search(r"^\| softmax \| 1 \| [0-9.]+ \| [0-9.]+ \| 1\.00 \| 1\.00 \| 1\.00 1\.00 \| [0-9.]+ \(1\.00x\) "
                     r"\| - \|", table, re.M)

    # A second seed resumes: the runs done are kept, not run again; the table has mean and spread.
    proc = run_script("hf_sparse_classifier.py", *options, "--runs", "softmax", "recipe", "--seeds", "1", "2",
                      "--save-models")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("already") == 2
    again = json.loads((out / "results.json").read_text())["runs"]
    assert again["softmax"]["1"] == results["softmax"] and list(again["recipe"]) == ["1", "2"]
    # The saved model is the one scored: its alphas, its floor, with its tokenizer.
    from transformers import BertForSequenceClassification

    import fairseq_sparse.hf as hf

    saved = hf.from_pretrained(BertForSequenceClassification, out / "models" / "recipe_seed2")
    torch.testing.assert_close(torch.stack(list(hf.head_alphas(saved).values())),
                               torch.tensor(again["recipe"]["2"]["alpha"]))
    assert (out / "models" / "recipe_seed2" / "tokenizer_config.json").is_file()
    assert not (out / "models" / "softmax_seed1").exists()
    assert re.search(r"^\| recipe \| 1, 2 \| [0-9.]+ ± [0-9.]+ \|", (out / "results.md").read_text(), re.M)
    # Other options in the same directory would mix two experiments in one table.
    proc = run_script("hf_sparse_classifier.py", *options[:-1], "3")
    assert proc.returncode != 0 and "alpha_floor_updates" in proc.stderr


@pytest.mark.parametrize("option, value", [("--alpha-floor", "2.5"), ("--alpha-floor-updates", "-1"),
                                           ("--updates", "0")])
def test_a_wrong_option_is_an_error_naming_it(tmp_path, option, value):
    proc = run_script("hf_sparse_classifier.py", "--out", tmp_path, option, value)
    assert proc.returncode == 2 and option in proc.stderr


def test_the_benchmark_runs_and_reports_ratios_to_sdpa(tiny_bert):
    proc = run_script("benchmarks/bench_hf_attention.py", "--model", tiny_bert, "--batch", "2", "--length", "8",
                      "--repeats", "2", "--no-memory", "--explicit")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^\| ([\w ()]+?) \| \d+ \| ([0-9.]+)x", proc.stdout, re.M)
    assert [name for name, _ in rows] == ["sdpa", "eager", "sparsemax", "entmax15", "alpha_entmax",
                                          "sparsemax (explicit)", "entmax15 (explicit)", "alpha_entmax (explicit)"]
    assert float(rows[0][1]) == 1.0


def test_the_benchmark_keeps_a_saved_models_alphas_and_reads_real_sentences(tmp_path, tiny_bert):
    """A model saved after sparsify (a fine-tuned one) is timed with its own learned alphas,
    and with --text its inputs are real sentences, on which each implementation's density
    is reported."""
    import torch
    from transformers import AutoTokenizer, BertModel

    import fairseq_sparse.hf as hf

    model = hf.sparsify(BertModel.from_pretrained(tiny_bert), "alpha_entmax", alpha_init=1.9)
    with torch.no_grad():  # scores large enough for zeros in a 32-wide random model
        for name, p in model.named_parameters():
            if name.endswith(("query.weight", "key.weight")):
                p.mul_(6)
    model.save_pretrained(tmp_path / "sparse")
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path / "sparse")
    proc = run_script("benchmarks/bench_hf_attention.py", "--model", tmp_path / "sparse", "--batch", "3", "--length",
                      "24", "--repeats", "1", "--no-memory", "--text",
                      shared_data("text", "hsvae-dbpedia14") / "test.txt")
    assert proc.returncode == 0, proc.stderr[-3000:]
    density = dict(re.findall(r"^\| (\w+) \|.*\| ([0-9.]+) \|$", proc.stdout, re.M))
    assert float(density["sdpa"]) == 1.0 and float(density["alpha_entmax"]) < 0.9
    assert abs(float(density["alpha_entmax"]) - float(density["sparsemax"])) < 0.25, "alpha 1.9 is near sparsemax"


def test_an_interrupted_run_resumes_at_its_last_evaluation_as_if_it_had_not_stopped(tmp_path, tiny_bert,
                                                                                    monkeypatch):
    """A run stopped after its second evaluation (a killed process) restarts from the state it
    saved there and ends with the same log, accuracies and alphas as a run never stopped:
    the same batches (an epoch is 7 batches here, so the stop falls inside the second), the
    same dropout, the same optimizer."""
    from fairseq_sparse import configs
    from fairseq_sparse.hf import experiment_classifier

    def options(out):
        return configs.parse(experiment_classifier.ClassifierConfig, "", [
            "--out", str(out), "--data", str(shared_data("text", "hsvae-dbpedia14")), "--bert-model", str(tiny_bert),
            "--runs", "recipe", "--train-per-class", "2", "--dev-per-class", "1", "--updates", "12",
            "--eval-every", "4", "--batch-size", "4", "--max-test", "14", "--alpha-floor", "1.6",
            "--alpha-floor-updates", "4"])

    experiment_classifier.run(options(tmp_path / "straight"))
    evaluate, calls = experiment_classifier.evaluate, []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # after the second evaluation's state was saved
            raise KeyboardInterrupt
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(experiment_classifier, "evaluate", stopping)
    with pytest.raises(KeyboardInterrupt):
        experiment_classifier.run(options(tmp_path / "stopped"))
    state = torch.load(tmp_path / "stopped" / "checkpoints" / "recipe_seed1.pt", weights_only=False)
    assert state["update"] == 8 and [e["update"] for e in state["log"]] == [4, 8]
    # The saved state is of these options: others in the same directory are refused, not resumed.
    with pytest.raises(SystemExit, match=r"options \(lr\)"):
        experiment_classifier.run(dataclasses.replace(options(tmp_path / "stopped"), lr=1e-3))
    monkeypatch.setattr(experiment_classifier, "evaluate", evaluate)
    experiment_classifier.run(options(tmp_path / "stopped"))
    assert not (tmp_path / "stopped" / "checkpoints" / "recipe_seed1.pt").exists()
    straight, resumed = (json.loads((tmp_path / d / "results.json").read_text())["runs"]["recipe"]["1"]
                         for d in ("straight", "stopped"))
    for key in ("log", "dev_accuracy", "test_accuracy", "density", "dev_density", "alpha", "tokens"):
        assert resumed[key] == straight[key], key
    assert len(resumed["log"]) == 3 and resumed["wall_seconds"] > 0


def test_a_floor_the_run_cannot_reach_and_test_classes_outside_training_are_refused(tmp_path):
    from fairseq_sparse.hf.experiment_classifier import ClassifierConfig, run

    with pytest.raises(ValueError, match=r"--alpha-floor-updates 500 is beyond --updates 300: .* end at 1\.304"):
        ClassifierConfig(out=tmp_path, data=tmp_path, alpha_floor_updates=500)
    ClassifierConfig(out=tmp_path, data=tmp_path, runs=("softmax",), alpha_floor_updates=500)  # no recipe, no floor
    for split, labels in (("valid", [0, 1, 0, 1]), ("test", [1, 0, 14])):
        (tmp_path / f"{split}.txt").write_text("".join(f"sentence {i}\n" for i in range(len(labels))))
        (tmp_path / f"{split}_labels.txt").write_text("".join(f"{label}\n" for label in labels))
    config = ClassifierConfig(out=tmp_path / "out", data=tmp_path, train_per_class=1, dev_per_class=1, runs=("softmax",))
    with pytest.raises(SystemExit, match=r"test_labels.txt:3: class 14 is not among the training classes \(0, 1\)"):
        run(config)
