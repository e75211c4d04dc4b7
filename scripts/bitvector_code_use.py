"""Does a trained bit-vector VAE's code tell its decoder anything?

Runs whose encoder stopped moving (SparseMAP at a single code, a stalled Gumbel run)
end near one -ELBO on the full MNIST. This script measures what such a model does
with its code, for ``fairseq-train`` checkpoints of ``--arch bitvector_vae``, on the
10,000 official MNIST test images:

- **the floor**: the -ELBO of a model whose q puts each image on one code and whose
  decoder ignores that code. Such a decoder gives every image the same per-pixel
  distributions, and the best of those for the training images are the pixels'
  grey-level histograms. So the floor is the test images' cross-entropy under the
  training images' histograms (add-0.1 smoothing), plus D bits per image: the KL
  from a one-code q to the uniform prior over {0, 1}^D;
- q's entropy per image, in bits (0: one code);
- how many distinct codes the test images get (each image's most probable code);
- the reconstruction -log p(x | z) in bits per pixel, at each image's own code and at
  the code of another test image (a fixed random permutation). If the two are equal,
  the code tells the decoder nothing about its image;
- -ELBO in bits per pixel, with the run's own estimator, as in validation;
- what training still tells the encoder: the norm of the gradient of the mean
  training-mode loss in the encoder's weights, on the first 1,000 official training
  images, and the median |score| of their bits. Saturated scores (a one-code q)
  leave a relaxed sample with no slope and SparseMAP with none at all, so there
  this norm is near or exactly 0.

    python scripts/bitvector_code_use.py CHECKPOINT [CHECKPOINT ...] [--out table.md]
"""

import argparse
import math
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import fairseq_sparse  # noqa: E402
from fairseq_sparse.experiments import FULL_MNIST, bits_per_pixel  # noqa: E402

HISTOGRAM_SMOOTHING = 0.1
CHUNK = 100  # images at a time: their decoder logits are CHUNK x 784 x 256 floats
GRADIENT_IMAGES = 1000


def pixel_histogram_cross_entropy(train, test, levels):
    """Bits per pixel of ``test`` under each pixel's grey-level histogram over ``train``."""
    counts = torch.zeros(train.shape[1], levels, dtype=torch.float64)
    counts.scatter_add_(1, train.t(), torch.ones_like(train.t(), dtype=torch.float64))
    log_p = torch.log2((counts + HISTOGRAM_SMOOTHING) / (counts.sum(1, keepdim=True) + levels * HISTOGRAM_SMOOTHING))
    return -log_p.gather(1, test.t()).mean().item()


def most_probable_codes(scores, estimator):
    """(codes (B, D), q's entropy per image in nats): from the estimator's own sparse
    distribution where it has one, else from the mean-field Bernoulli."""
    if hasattr(estimator, "support"):
        probs, structures = estimator.support(scores)
        best = probs.argmax(-1)
        codes = structures[torch.arange(len(scores)), best]
        return codes, torch.special.entr(probs).sum(-1)  # entr(0) = 0: the padding adds nothing
    return (scores > 0).to(scores.dtype), estimator.space.entropy(scores)


def reconstruction_bits(model, levels, codes):
    """-log p(x | z) of each image at its row of ``codes``, in bits per pixel."""
    nats = sum(model.reconstruction(levels[s:s + CHUNK], codes[s:s + CHUNK]).sum().item()
               for s in range(0, len(levels), CHUNK))
    return bits_per_pixel(nats, len(levels), model.pixels)


def encoder_gradient(model, estimator, levels):
    """(norm of the gradient of the mean -ELBO surrogate in the encoder's weights,
    median |score|), in training mode: the estimator samples as it did in training."""
    model.train()
    estimator.train()
    weights = list(model.encoder.parameters())
    total = [torch.zeros_like(w) for w in weights]
    with torch.enable_grad():
        for start in range(0, len(levels), CHUNK):
            loss = model.latent_loss({"net_input": {"images": levels[start:start + CHUNK]}}, estimator)[0]
            for t, g in zip(total, torch.autograd.grad(loss / len(levels), weights, allow_unused=True)):
                if g is not None:
                    t += g
    scores = torch.cat([model(levels[s:s + CHUNK]) for s in range(0, len(levels), CHUNK)])
    return torch.cat([t.flatten() for t in total]).norm().item(), scores.abs().median().item()


@torch.no_grad()
def measure(checkpoint, test, permutation, train):
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    torch.manual_seed(0)  # the Monte Carlo estimators sample in the -ELBO
    model = models[0].eval()
    criterion = task.build_criterion(cfg.criterion)
    estimator = criterion.estimator.eval()
    model.nll_samples = 0  # the -ELBO alone: no importance-sampled NLL
    codes, entropy, neg_elbo = [], [], 0.0
    for start in range(0, len(test), CHUNK):
        levels = test[start:start + CHUNK]
        chunk_codes, chunk_entropy = most_probable_codes(model(levels), estimator)
        codes.append(chunk_codes)
        entropy.append(chunk_entropy)
        neg_elbo += model.latent_loss({"net_input": {"images": levels}}, estimator)[0].item()
    codes, entropy = torch.cat(codes), torch.cat(entropy)
    row = {"checkpoint": str(checkpoint), "estimator": cfg.criterion.estimator, "seed": cfg.common.seed,
           "bits": model.bits, "q_entropy_bits": entropy.mean().item() / math.log(2),
           "distinct_codes": len(torch.unique(codes, dim=0)),
           "reconstruction_own": reconstruction_bits(model, test, codes),
           "reconstruction_swapped": reconstruction_bits(model, test, codes[permutation]),
           "neg_elbo": bits_per_pixel(neg_elbo, len(test), model.pixels)}
    # Last: it puts the model and estimator in training mode.
    row["encoder_gradient_norm"], row["median_abs_score"] = encoder_gradient(model, estimator, train[:GRADIENT_IMAGES])
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", type=Path, help="fairseq checkpoints of --arch bitvector_vae")
    parser.add_argument("--data", type=Path, default=FULL_MNIST,
                        help="the full MNIST's IDX files")
    parser.add_argument("--images", type=int, default=10000, help="the first this many official test images")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args(argv)
    for path in args.checkpoints:
        if not path.is_file():
            parser.error(f"{path}: no such checkpoint")
    fairseq_sparse.load_plugin()
    from fairseq_sparse.latent.images import load_images

    images = load_images("mnist", args.data)
    if images.official_test is None:
        parser.error(f"--data {args.data}: needs the official train/test IDX files")
    if args.images < 1:
        parser.error(f"--images {args.images}: must be positive")
    train, test = images.levels[:-images.official_test], images.levels[-images.official_test:][:args.images]
    histogram = pixel_histogram_cross_entropy(train, test, images.num_levels)
    permutation = torch.randperm(len(test), generator=torch.Generator().manual_seed(0))
    rows = [measure(path, test, permutation, train) for path in args.checkpoints]
    lines = [f"Per-pixel histogram cross-entropy of the test images: {histogram:.3f} bits per pixel.", "",
             "| checkpoint | estimator | seed | D | floor: histogram + D bits | -ELBO | q entropy, bits | "
             "distinct codes | reconstruction, own code | reconstruction, another image's code | "
             "median abs score | encoder gradient norm |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        floor = histogram + r["bits"] / test.shape[1]
        lines.append(f"| {r['checkpoint']} | {r['estimator']} | {r['seed']} | {r['bits']} | {floor:.3f} | "
                     f"{r['neg_elbo']:.3f} | {r['q_entropy_bits']:.2f} | {r['distinct_codes']} | "
                     f"{r['reconstruction_own']:.4f} | {r['reconstruction_swapped']:.4f} | "
                     f"{r['median_abs_score']:.3g} | {r['encoder_gradient_norm']:.3g} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
