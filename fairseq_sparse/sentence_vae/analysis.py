"""What a trained sentence VAE's code holds (Prokhorov et al. 2021, Sec. 6): a classifier
on the frozen encoder's samples against one trained end to end, a length probe, average
Hoyer, active units, the spike pattern and the classes' word-distribution divergences.

    fairseq-sparse-sentence-vae-analysis CHECKPOINT DATA_DIR --out DIR

DATA_DIR is the labelled corpus the model was trained on (train.txt, valid.txt,
test.txt with class labels, leading each line or in ``{split}_labels.txt``).  Train
sentences labelled -1 (the VAE trained on them without a class) are left out of
every classifier and of the word distributions; every test sentence needs its class.
Steps:

- the encoder is frozen; K = ``--samples`` posterior samples per sentence (drawn
  as the model's objective draws them: spike-and-slab for hsvae) train a
  classifier of two 32-unit Leaky-ReLU layers; at test time its class
  probabilities are averaged over K samples; the same classifier on the posterior
  means (one per sentence) measures the code without its sampling noise; both are
  scored on test and on the labelled valid sentences, the figure to choose a setting
  (epochs, dropout, prior) on without reading test;
- the baseline: the same classifier head on a GRU encoder of the same size,
  trained end to end on the labels (it does not depend on the VAE: ``--baseline-epochs 0``
  leaves it out, for a grid of VAEs on one corpus);
- average Hoyer of the test codes (one sample each) and of the posterior means, and
  the objective's KL terms on test (HSVAE's kl_z and kl_gamma apart);
- which dimensions the code uses at all: the active units (Burda et al. 2016: the
  posterior mean's variance over the test sentences above 0.01); for hsvae, how far
  its zeros adapt to the sentence (``hoyer.spike_pattern``): the bits of the spike
  pattern the sentence decides, against the pattern's entropy, and how many
  dimensions are spiked in at least 99% of the test sentences, in at most 1%, or
  switch between;
- a probe of what the code holds besides the class: the same head shape regressing
  each sentence's length (tokens) on its posterior mean, R^2 on test (1: the length
  is read off the code; 0: no better than the mean length).  Length is a surface
  property the decoder needs (when to end) and a topic classifier does not; Conneau
  et al. (2018) probe sentence embeddings for it the same way;
- ``gamma_class.png`` (hsvae only): per class, the fraction of sentences whose
  posterior mean of gamma (the spike probability) exceeds 1/2, per dimension;
- ``spike_pattern.png`` (hsvae only): per dimension, the entropy of its spike and the
  part of it the sentence decides;
- ``class_kl.png``: KL(class i || class j) between the add-1 smoothed word
  distributions of the training sentences of each class.

Everything is written to ``DIR/analysis.json`` and printed.  Each step says on stderr
what it does and, when done, how long it took (with a progress bar on a terminal): most of
the time goes to the end-to-end baseline, a GRU trained on every labelled training
sentence for ``--baseline-epochs`` epochs.
"""

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from fairseq import checkpoint_utils
from torch import nn
from tqdm import tqdm

from ..compat.checkpoint_files import load_for_task
from . import figures
from .hoyer import active_units, average_hoyer, spike_pattern
from .sentence_vae import encoder_input


@contextlib.contextmanager
def step(what):
    """Say on stderr what a step of the analysis does, then how long it took."""
    print(f"analysis: {what} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    yield
    print(f"analysis: {what}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


def epochs_bar(epochs, what):
    """range(epochs) with a progress bar on a terminal (none in a log)."""
    return tqdm(range(epochs), desc=what, unit="epoch", leave=False, file=sys.stderr, disable=None)


def classifier_head(inputs, classes):
    return nn.Sequential(nn.Linear(inputs, 32), nn.LeakyReLU(), nn.Linear(32, 32), nn.LeakyReLU(),
                         nn.Linear(32, classes))


def batches(dataset, size, indices=None):
    indices = range(len(dataset)) if indices is None else indices
    for start in range(0, len(indices), size):
        yield dataset.collater([dataset[i] for i in indices[start:start + size]])


def labelled(dataset):
    """Indices of the sentences with a class (label -1: none, e.g. the unlabelled text a VAE
    also trains on)."""
    return torch.nonzero(dataset.labels >= 0).flatten().tolist()


@torch.no_grad()
def encode(model, criterion, dataset, samples, indices=None):
    """codes (N, K, d) drawn as the objective draws them, mean codes (N, d), posterior
    spike probabilities E[gamma] (N, d), labels (N,), lengths in tokens (N,), and each
    KL term of the objective averaged over the sentences and draws ({name: nats per
    sentence}); N = the sentences of ``indices`` (default: all)."""
    codes, means, gammas, labels, lengths, kl = [], [], [], [], [], {}
    indices = range(len(dataset)) if indices is None else indices
    for batch in batches(dataset, 128, indices):
        posterior = model.encode(**encoder_input(batch["net_input"]))
        draws = [criterion.latent(posterior) for _ in range(samples)]
        codes.append(torch.stack([d[0] for d in draws], 1))
        means.append(draws[0][3])
        gammas.append(posterior["gamma_a"] / (posterior["gamma_a"] + posterior["gamma_b"]))
        labels.append(batch["labels"])
        lengths.append(batch["net_input"]["src_lengths"])
        for draw in draws:
            for name, value in draw[2].items():
                kl[name] = kl.get(name, 0.0) + value.sum().item() / samples
    return (torch.cat(codes), torch.cat(means), torch.cat(gammas), torch.cat(labels), torch.cat(lengths),
            {name: total / len(indices) for name, total in kl.items()})


def train_head(inputs, targets, outputs, loss, epochs, seed):
    """A classifier_head with ``outputs`` outputs trained on the rows of ``inputs`` (N, d)
    against ``targets`` (N, ...): Adam at 1e-3, batches of 128, ``epochs`` passes."""
    torch.manual_seed(seed)
    head = classifier_head(inputs.shape[-1], outputs)
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-3)
    for _ in epochs_bar(epochs, "classifier head"):
        for index in torch.randperm(len(inputs)).split(128):
            optimizer.zero_grad()
            loss(head(inputs[index]), targets[index]).backward()
            optimizer.step()
    return head


def train_frozen_classifier(train_codes, train_labels, classes, epochs, seed):
    """The classifier on codes (N, K, d): each of a sentence's K samples is a training row."""
    x = train_codes.reshape(-1, train_codes.shape[-1])
    y = train_labels[:, None].expand(-1, train_codes.shape[1]).reshape(-1)
    return train_head(x, y, classes, F.cross_entropy, epochs, seed)


def length_probe_r2(train_codes, train_lengths, test_codes, test_lengths, epochs, seed):
    """R^2 on test of the classifier's head shape regressing sentence length on the codes
    (N, d): 1 - SSE / SST, SST about the test lengths' own mean, so predicting the mean
    length scores 0.  The target is standardised with train's mean and spread."""
    center, spread = train_lengths.float().mean(), train_lengths.float().std().clamp_min(1e-6)
    head = train_head(train_codes, (train_lengths.float() - center) / spread, 1,
                      lambda out, target: F.mse_loss(out.squeeze(-1), target), epochs, seed)
    with torch.no_grad():
        predicted = head(test_codes).squeeze(-1) * spread + center
    actual = test_lengths.float()
    total = ((actual - actual.mean()) ** 2).sum().clamp_min(1e-12)
    return 1.0 - (((predicted - actual) ** 2).sum() / total).item()


@torch.no_grad()
def monte_carlo_accuracy(head, codes, labels):
    """Accuracy of the class probabilities averaged over each sentence's K samples."""
    probs = torch.softmax(head(codes), -1).mean(1)
    return 100 * (probs.argmax(-1) == labels).float().mean().item()


def accuracies(head, mean_head, codes, means, labels):
    """The frozen-encoder classifier's accuracy on codes (N, K, d) and the posterior-means
    classifier's on means (N, d)."""
    return monte_carlo_accuracy(head, codes, labels), monte_carlo_accuracy(mean_head, means[:, None], labels)


class EndToEndClassifier(nn.Module):
    def __init__(self, vocabulary, embed_dim, hidden_dim, classes, pad):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, embed_dim, padding_idx=pad)
        self.encoder = nn.GRU(embed_dim, hidden_dim, batch_first=True)
        self.head = classifier_head(hidden_dim, classes)

    def forward(self, tokens, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                                   enforce_sorted=False)
        return self.head(self.encoder(packed)[1][-1])


def end_to_end_accuracy(task, model_cfg, classes, epochs, seed):
    torch.manual_seed(seed)
    train, test = task.datasets["train"], task.datasets["test"]
    rows = torch.tensor(labelled(train))
    model = EndToEndClassifier(len(task.dictionary), model_cfg.embed_dim, model_cfg.hidden_dim, classes,
                               task.dictionary.pad())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in epochs_bar(epochs, "end-to-end GRU"):
        order = rows[torch.randperm(len(rows))].tolist()
        for start in range(0, len(order), 64):
            batch = train.collater([train[i] for i in order[start:start + 64]])
            optimizer.zero_grad()
            F.cross_entropy(model(batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"]),
                            batch["labels"]).backward()
            optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in batches(test, 128):
            scores = model(batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"])
            correct += (scores.argmax(-1) == batch["labels"]).sum().item()
    return 100 * correct / len(test)


def class_word_kl(task, classes):
    """KL(class i || class j) of add-1 smoothed unigram distributions over the vocabulary
    (the labelled training sentences)."""
    train = task.datasets["train"]
    counts = np.ones((classes, len(task.dictionary)))
    for index in labelled(train):
        words = train.items[index][:-1].numpy()  # </s> is no word
        np.add.at(counts[int(train.labels[index])], words, 1)
    p = counts / counts.sum(1, keepdims=True)
    return (p[:, None, :] * (np.log(p[:, None, :]) - np.log(p[None, :, :]))).sum(-1)


def analyse(checkpoint, data, out, samples=5, classifier_epochs=30, baseline_epochs=5, seed=1):
    """Every figure of the analysis for ``checkpoint`` on the labelled corpus ``data``, as a
    dict (also what ``analysis.json`` holds); the plots are written to ``out``.  A corpus
    without class labels, or with unlabelled test sentences, is a ValueError naming it."""
    overrides = {"data": str(data)}
    state = load_for_task(checkpoint, "sentence_vae", "fairseq-sparse-sentence-vae-analysis", overrides)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)], arg_overrides=overrides,
                                                                      state=state)
    model = models[0].eval()
    criterion = task.build_criterion(cfg.criterion)
    classes = task.num_classes
    if classes < 2:
        raise ValueError(f"{data}/train.txt has no class labels: frozen-encoder classification needs them")
    for split in ("train", "valid", "test"):
        task.load_dataset(split)
    unlabelled_test = len(task.datasets["test"]) - len(labelled(task.datasets["test"]))
    if unlabelled_test:
        raise ValueError(f"{data}: {unlabelled_test} test sentences are labelled -1 (no class); the "
                         "classifiers are scored on every test sentence, so each needs its class")
    torch.manual_seed(seed)
    train_rows = labelled(task.datasets["train"])
    with step(f"encoding {len(train_rows)} labelled train and {len(task.datasets['test'])} test sentences, "
              f"{samples} samples each"):
        train_codes, train_means, _, train_labels, train_lengths, _ = encode(
            model, criterion, task.datasets["train"], samples, train_rows)
        test_codes, test_means, test_gamma, test_labels, test_lengths, test_kl = encode(
            model, criterion, task.datasets["test"], samples)
    with step(f"training the frozen-encoder classifiers, {classifier_epochs} epochs each"):
        head = train_frozen_classifier(train_codes, train_labels, classes, classifier_epochs, seed)
        # The same head on the posterior means (HSVAE: (1 - E[gamma]) mu) tells what the code holds
        # apart from the sampling noise, which for HSVAE includes which dimensions the draw spiked.
        mean_head = train_frozen_classifier(train_means[:, None], train_labels, classes, classifier_epochs,
                                            seed)
    # Valid is encoded after test, so that test's draws, and every figure read on test before
    # valid was scored, stay what they were.
    valid_rows = labelled(task.datasets["valid"])
    valid_accuracy = valid_accuracy_means = None
    if valid_rows:
        valid_codes, valid_means, _, valid_labels, _, _ = encode(model, criterion, task.datasets["valid"],
                                                                 samples, valid_rows)
        valid_accuracy, valid_accuracy_means = accuracies(head, mean_head, valid_codes, valid_means, valid_labels)
    test_accuracy, test_accuracy_means = accuracies(head, mean_head, test_codes, test_means, test_labels)
    end_to_end = None
    if baseline_epochs > 0:
        with step(f"training the end-to-end GRU baseline on {len(train_rows)} sentences, {baseline_epochs} "
                  "epochs (--baseline-epochs 0 leaves it out)"):
            end_to_end = end_to_end_accuracy(task, cfg.model, classes, baseline_epochs, seed)
    with step("probing the posterior means for sentence length"):
        length_r2 = length_probe_r2(train_means, train_lengths, test_means, test_lengths, classifier_epochs, seed)
    results = {
        "objective": cfg.criterion._name, "latent_dim": test_codes.shape[-1], "classes": classes,
        "samples_per_sentence": samples,
        "frozen_encoder_accuracy": test_accuracy,
        "frozen_encoder_accuracy_means": test_accuracy_means,
        # The same two on valid's labelled sentences (None: valid has none), to choose settings on.
        "frozen_encoder_accuracy_valid": valid_accuracy,
        "frozen_encoder_accuracy_means_valid": valid_accuracy_means,
        "valid_labelled_sentences": len(valid_rows),
        "end_to_end_accuracy": end_to_end,
        # What always answering train's most frequent class scores on test: the floor both must beat.
        "majority_class_accuracy": 100 * (test_labels == train_labels.mode().values).float().mean().item(),
        "length_probe_r2_means": length_r2,
        "average_hoyer_samples": average_hoyer(test_codes[:, 0]),
        "average_hoyer_means": average_hoyer(test_means),
        "test_kl": test_kl,  # each KL term of the objective, nats per sentence
        "active_units": int(active_units(test_means).sum()),
        # Beside it, how far from that threshold the most varied dimension is.
        "largest_mean_variance": test_means.double().var(0, unbiased=True).max().item(),
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.criterion._name == "hsvae":
        spiked = (test_gamma > 0.5).float()
        gamma_class = torch.stack([spiked[test_labels == c].mean(0) for c in range(classes)]).numpy()
        figures.heat_map(gamma_class, out / "gamma_class.png", "gamma_class: fraction with E[gamma] > 1/2",
                 "latent dimension", "class", "fraction of sentences", limits=(0, 1))
        results["gamma_class"] = gamma_class.round(4).tolist()
        results["spike_pattern"] = spike_pattern(test_gamma)
        figures.spike_bars(results["spike_pattern"], out / "spike_pattern.png")
    kl = class_word_kl(task, classes)
    figures.heat_map(kl, out / "class_kl.png", "KL(class i || class j), word distributions", "class j", "class i",
             "nats")
    results["class_word_kl"] = kl.round(4).tolist()
    results["notes"] = notes(results)
    return results


def notes(results):
    """Sentences that say how figures that seem to contradict each other both hold."""
    said = []
    r2 = results.get("length_probe_r2_means")
    if results["active_units"] == 0 and r2 is not None and r2 > 0.05:
        said.append(f"active_units 0 beside a length probe R2 of {r2:.2f}: no dimension's posterior mean varies "
                    f"over the test sentences by more than Burda et al.'s 0.01 (the largest variance is "
                    f"{results['largest_mean_variance']:.2g}), yet what little varies carries sentence length; the "
                    "threshold is on the means' scale, the probe's R2 is not")
    pattern = results.get("spike_pattern")
    if pattern and pattern["always_zero"] and pattern["information_bits"] > 0.05:
        said.append(f"always_zero {pattern['always_zero']} beside {pattern['information_bits']:.2f} bits decided by "
                    "the sentence: a dimension counts as always zero where it is more likely zero than not "
                    "(E[gamma] > 1/2) for 99% of the sentences, yet how likely still moves with the sentence, and "
                    "those bits measure that")
    return said


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, help="a sentence VAE checkpoint written by fairseq-train")
    parser.add_argument("data", type=Path, help="the labelled corpus directory (train/valid/test.txt)")
    parser.add_argument("--out", type=Path, required=True, help="directory for analysis.json and the plots")
    parser.add_argument("--samples", type=int, default=5,
                        help="K: posterior samples per sentence (default: %(default)s)")
    parser.add_argument("--classifier-epochs", type=int, default=30,
                        help="epochs of the classifier on the frozen encoder's samples (default: %(default)s)")
    parser.add_argument("--baseline-epochs", type=int, default=5,
                        help="epochs of the end-to-end GRU classifier; 0 leaves it out (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the classifiers and samples (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.checkpoint.is_file():
        raise SystemExit(f"{args.checkpoint}: no such checkpoint")
    try:
        results = analyse(args.checkpoint, args.data, args.out, args.samples, args.classifier_epochs,
                          args.baseline_epochs, args.seed)
    except (ValueError, RuntimeError) as error:  # RuntimeError: a torn file or not a checkpoint
        raise SystemExit(str(error)) from None
    (args.out / "analysis.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    for key in ("objective", "frozen_encoder_accuracy", "frozen_encoder_accuracy_means",
                "frozen_encoder_accuracy_valid", "frozen_encoder_accuracy_means_valid", "end_to_end_accuracy",
                "majority_class_accuracy", "length_probe_r2_means", "average_hoyer_samples", "average_hoyer_means",
                "active_units", "largest_mean_variance", "spike_pattern"):
        if key not in results:
            continue
        value = results[key]
        if key == "spike_pattern":  # its sums; the per-dimension bits are in the JSON and the plot
            value = {name: bits for name, bits in value.items() if name != "per_dimension"}
        missing = "no labelled valid sentence" if key.endswith("_valid") else "not run"
        print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {missing if value is None else value}")
    for note in results["notes"]:
        print(f"note: {note}")
    print(f"written: {args.out / 'analysis.json'}, plots in {args.out}")


if __name__ == "__main__":
    main()
