"""What a trained ``bitvector_vae``'s code tells its decoder: q's entropy and distinct
codes, the reconstruction at an image's own code and at another image's, -ELBO, the
encoder's gradient left, and the floor a decoder that ignores its code reaches (the
pixels' grey-level histograms).  ``scripts/bitvector_code_use.py`` is its command line."""

import math

import torch
from fairseq import checkpoint_utils

from .images import bits_per_pixel
from ..markdown import table as markdown_table

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
    """The figures of one ``bitvector_vae`` checkpoint on the test images' grey levels
    (``test``), with ``permutation`` pairing each image with another's code, and the
    encoder's gradient on the training images ``train``."""
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
    row["encoder_gradient_norm"], row["median_abs_score"] = encoder_gradient(model, estimator, train)
    return row


def code_use_table(checkpoints, images, count, gradient_images=GRADIENT_IMAGES):
    """A Markdown table of :func:`measure` for each checkpoint, on the first ``count`` official
    test images of ``images`` (:func:`~.images.load_images` of the full MNIST), its floor
    the pixel histogram's cross-entropy plus D bits spread over the pixels; the encoder's
    gradient on the first ``gradient_images`` official training images."""
    train, test = images.levels[:-images.official_test], images.levels[-images.official_test:][:count]
    histogram = pixel_histogram_cross_entropy(train, test, images.num_levels)
    permutation = torch.randperm(len(test), generator=torch.Generator().manual_seed(0))
    rows = [measure(path, test, permutation, train[:gradient_images]) for path in checkpoints]
    header = ["checkpoint", "estimator", "seed", "D", "floor: histogram + D bits", "-ELBO", "q entropy, bits",
              "distinct codes", "reconstruction, own code", "reconstruction, another image's code",
              "median abs score", "encoder gradient norm"]
    cells = [[r["checkpoint"], r["estimator"], r["seed"], r["bits"], f"{histogram + r['bits'] / test.shape[1]:.3f}",
              f"{r['neg_elbo']:.3f}", f"{r['q_entropy_bits']:.2f}", r["distinct_codes"],
              f"{r['reconstruction_own']:.4f}", f"{r['reconstruction_swapped']:.4f}",
              f"{r['median_abs_score']:.3g}", f"{r['encoder_gradient_norm']:.3g}"] for r in rows]
    return (f"Per-pixel histogram cross-entropy of the test images: {histogram:.3f} bits per pixel.\n\n"
            + markdown_table(header, cells))
