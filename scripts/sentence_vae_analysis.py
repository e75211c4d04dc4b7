"""Analyse a trained sentence VAE (Prokhorov et al. 2021, Sec. 6): frozen-encoder
classification against an end-to-end classifier, average Hoyer, the gamma_class
heat map and the classes' word-distribution divergences.

    python scripts/sentence_vae_analysis.py CHECKPOINT DATA_DIR --out DIR

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

Everything is written to ``DIR/analysis.json`` and printed.
"""

import argparse
import json
from pathlib import Path

from fairseq_sparse.sentence_vae.analysis import analyse


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
    except ValueError as error:
        raise SystemExit(str(error)) from None
    (args.out / "analysis.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    for key in ("objective", "frozen_encoder_accuracy", "frozen_encoder_accuracy_means",
                "frozen_encoder_accuracy_valid", "frozen_encoder_accuracy_means_valid", "end_to_end_accuracy",
                "majority_class_accuracy", "length_probe_r2_means", "average_hoyer_samples", "average_hoyer_means",
                "active_units", "spike_pattern"):
        if key not in results:
            continue
        value = results[key]
        if key == "spike_pattern":  # its sums; the per-dimension bits are in the JSON and the plot
            value = {name: bits for name, bits in value.items() if name != "per_dimension"}
        missing = "no labelled valid sentence" if key.endswith("_valid") else "not run"
        print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {missing if value is None else value}")
    print(f"written: {args.out / 'analysis.json'}, plots in {args.out}")


if __name__ == "__main__":
    main()
