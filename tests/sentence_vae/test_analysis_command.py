"""fairseq-sparse-sentence-vae-analysis on a small hsvae trained by fairseq-train on real Yelp text."""

import json
import re

import numpy as np
import pytest

from tests.conftest import REPO, run_cli, yelp_corpus


def run_analysis(checkpoint, data, out, samples, classifier_epochs):
    """fairseq-sparse-sentence-vae-analysis on a checkpoint (one baseline epoch): its analysis.json and printout."""
    proc = run_cli("fairseq-sparse-sentence-vae-analysis", checkpoint, data, "--out", out, "--samples", samples,
                   "--classifier-epochs", classifier_epochs, "--baseline-epochs", "1", check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Each step says what it does and, done, how long it took (it was silent for minutes).
    for step in ("encoding", "training the frozen-encoder classifiers", "training the end-to-end GRU baseline",
                 "probing the posterior means"):
        assert re.search(rf"^analysis: {step}.*: done in [0-9.]+ s$", proc.stderr, re.M), step
    return json.loads((out / "analysis.json").read_text()), proc.stdout


def test_analysis_of_a_trained_hsvae(tmp_path):
    data = yelp_corpus(tmp_path / "yelp", 300, 60, 100)
    # The last 100 training sentences without a label (-1 in a labels file): the VAE trains
    # on them, the classifiers and word distributions leave them out.
    lines = (data / "train.txt").read_text(encoding="utf-8").splitlines()
    (data / "train.txt").write_text("".join(line.split(" ", 1)[1] + "\n" for line in lines), encoding="utf-8")
    (data / "train_labels.txt").write_text("".join(line.split(" ", 1)[0] + "\n" for line in lines[:200])
                                           + "-1\n" * 100)
    # Valid is test's sentences and labels, so the posterior means (no sampling) must score the
    # same on both: the valid figures are the same heads on valid's labelled sentences.
    (data / "valid.txt").write_text((data / "test.txt").read_text(encoding="utf-8"), encoding="utf-8")
    run_cli("fairseq-train", data, "--user-dir", REPO / "fairseq_sparse", "--task", "sentence_vae", "--arch",
            "sentence_vae", "--criterion", "hsvae", "--latent-dim", "6", "--embed-dim", "32", "--hidden-dim", "48",
            "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "32", "--cpu", "--num-workers", "0",
            "--max-epoch", "1", "--save-dir", tmp_path / "ckpt", "--log-format", "simple", cwd=tmp_path)
    out = tmp_path / "analysis"
    results, printed = run_analysis(tmp_path / "ckpt" / "checkpoint_last.pt", data, out, samples=3, classifier_epochs=3)
    assert results["objective"] == "hsvae" and results["classes"] == 5 and results["latent_dim"] == 6
    for key in ("frozen_encoder_accuracy", "frozen_encoder_accuracy_means", "end_to_end_accuracy",
                "majority_class_accuracy"):
        assert 0 <= results[key] <= 100
    assert results["valid_labelled_sentences"] == 100
    assert results["frozen_encoder_accuracy_means_valid"] == results["frozen_encoder_accuracy_means"]
    assert 0 <= results["frozen_encoder_accuracy_valid"] <= 100
    assert 0 <= results["average_hoyer_samples"] <= 1
    assert 0 <= results["active_units"] <= 6
    pattern = results["spike_pattern"]
    assert pattern["always_zero"] + pattern["never_zero"] + pattern["switching"] == 6
    assert 0 <= pattern["information_bits"] <= pattern["entropy_bits"] <= 6
    assert results["length_probe_r2_means"] <= 1
    # HSVAE's KL terms on test, apart: the Gaussian's (information about x) and the Beta's.
    assert set(results["test_kl"]) == {"kl_z", "kl_gamma"} and min(results["test_kl"].values()) >= 0
    gamma_class = np.array(results["gamma_class"])
    assert gamma_class.shape == (5, 6) and ((0 <= gamma_class) & (gamma_class <= 1)).all()
    kl = np.array(results["class_word_kl"])
    assert np.allclose(np.diag(kl), 0) and (kl[~np.eye(5, dtype=bool)] > 0).all()
    assert np.allclose(kl, class_word_kl_of(lines[:200], tmp_path / "ckpt" / "checkpoint_last.pt"), atol=1e-4)
    assert len(pattern["per_dimension"]["information_bits"]) == 6
    assert sum(pattern["per_dimension"]["entropy_bits"]) == pytest.approx(pattern["entropy_bits"], abs=1e-3)
    for png in ("gamma_class.png", "class_kl.png", "spike_pattern.png"):
        assert (out / png).stat().st_size > 5000
    assert "frozen_encoder_accuracy:" in printed and "frozen_encoder_accuracy_valid:" in printed
    assert "active_units:" in printed
    # Test sentences are what the classifiers are scored on: one without a class is an error.
    test = (data / "test.txt").read_text(encoding="utf-8").splitlines()
    (data / "test.txt").write_text("".join(line.split(" ", 1)[1] + "\n" for line in test), encoding="utf-8")
    (data / "test_labels.txt").write_text("-1\n" + "".join(line.split(" ", 1)[0] + "\n" for line in test[1:]))
    proc = run_cli("fairseq-sparse-sentence-vae-analysis", tmp_path / "ckpt" / "checkpoint_last.pt", data,
                   "--out", out, check=False, timeout=600)
    assert proc.returncode != 0 and "1 test sentences are labelled -1 (no class)" in proc.stderr


def class_word_kl_of(labelled_lines, checkpoint):
    """KL(class i || class j) of add-1 smoothed unigrams, counted directly from ``LABEL words``
    lines over a vocabulary of the checkpoint's size (the KL does not depend on word ids)."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    size = next(w.shape[0] for name, w in state.items() if name.endswith("embed.weight"))
    ids = {}
    counts = np.ones((5, size))
    for line in labelled_lines:
        label, *words = line.split()
        for word in words:
            counts[int(label), ids.setdefault(word, len(ids))] += 1
    p = counts / counts.sum(1, keepdims=True)
    return (p[:, None, :] * (np.log(p[:, None, :]) - np.log(p[None, :, :]))).sum(-1)


def test_analysis_of_another_tasks_checkpoint_is_refused_by_name(tmp_path, ape_trained):
    """It crashed with `AttributeError: 'APETask' object has no attribute 'num_classes'`."""
    data, checkpoint = ape_trained
    proc = run_cli("fairseq-sparse-sentence-vae-analysis", checkpoint, data, "--out", tmp_path / "a", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{checkpoint} was trained with --task ape, not --task sentence_vae" in proc.stderr
