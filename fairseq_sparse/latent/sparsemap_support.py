"""Why SparseMAP's support collapses in the bit-vector VAE: a measurement
(``scripts/bitvector_sparsemap_support.py`` is its command line).

SparseMAP over bit-vectors puts its marginals at the projection of the scores on the
cube (``fairseq_sparse.latent.sparsemap``).  An image whose D scores all fall outside
the fractional band ((0, 1), or (-1, 1) with the paper's two-state factor) gets a
single code, and at a single code both the expected loss's and the entropy's
gradients in the scores are zero: that image stops teaching the encoder, and nothing
brings it back.  It trains the bit-vector VAE of ``--arch bitvector_vae`` (the
same model and estimators as ``fairseq-train``) on the first ``--images`` official
MNIST training images and, per epoch, records for SparseMAP with ``--bit-states`` 1
and 2 and for Gumbel (a Monte Carlo estimator, whose encoder always gets a gradient):

- decoder calls per image (the support size);
- the fraction of images with a single code (every bit outside the band);
- the encoder's gradient norm, averaged over the epoch's updates;
- -ELBO in bits per pixel (training images);

and at the end -ELBO and the importance-sampled NLL on the first ``--test-images``
official test images.
Writes ``DIR/support.json`` and ``DIR/support.png``.
"""

import json
import time

import torch

from .images import bits_per_pixel
from . import BitVector
from .bitvector_vae_model import BitVectorVAEModel
from .estimators import build_estimator
from .images import load_images
from .sparsemap import bit_scores

VARIANTS = {"sparsemap, 1 bit state": ("sparsemap", {"bit_states": 1}),
            "sparsemap, 2 bit states (paper's factor)": ("sparsemap", {"bit_states": 2}),
            "gumbel": ("gumbel", {})}


def band(scores, bit_states):
    """Which bits are fractional: SparseMAP's marginal lies strictly inside (0, 1)."""
    shifted = bit_scores(scores, bit_states)
    return (shifted > 0) & (shifted < 1)


def train(variant, levels, test_levels, args):
    name, options = VARIANTS[variant]
    torch.manual_seed(args.seed)
    model = BitVectorVAEModel(levels.shape[1], 256, args.bits, 128, 5, nll_samples=args.nll_samples)
    estimator = build_estimator(name, space=BitVector(args.bits), **options)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    epochs = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        estimator.train()
        start, calls, neg_elbo, single, fractional, grad_norms = time.time(), 0.0, 0.0, 0, 0.0, []
        for index in torch.randperm(len(levels)).split(args.batch_size):
            loss, stats = model.latent_loss({"net_input": {"images": levels[index]}}, estimator)
            optimizer.zero_grad()
            loss.backward()
            grad_norms.append(float(torch.cat([p.grad.flatten() for p in model.encoder.parameters()]).norm()))
            optimizer.step()
            calls += float(stats["decoder_calls"])
            neg_elbo += float(stats["neg_elbo"])
            if name == "sparsemap":
                with torch.no_grad():
                    inside = band(model(levels[index]), options["bit_states"])
                single += int((~inside.any(-1)).sum())
                fractional += float(inside.float().mean()) * len(index)
        row = {"epoch": epoch, "decoder_calls": calls / len(levels),
               "neg_elbo_bits_per_dim": bits_per_pixel(neg_elbo, len(levels), levels.shape[1]),
               "encoder_grad_norm": sum(grad_norms) / len(grad_norms), "seconds": round(time.time() - start, 1)}
        if name == "sparsemap":
            row["single_code_fraction"] = single / len(levels)
            row["fractional_bit_fraction"] = fractional / len(levels)
        epochs.append(row)
        print(variant, json.dumps(row), flush=True)
    model.eval()
    estimator.eval()
    nll = neg_elbo = 0.0
    with torch.no_grad():
        for index in torch.arange(len(test_levels)).split(100):
            _, stats = model.latent_loss({"net_input": {"images": test_levels[index]}}, estimator)
            nll += float(stats["nll"])
            neg_elbo += float(stats["neg_elbo"])
    test = {"nll_bits_per_dim": bits_per_pixel(nll, len(test_levels), test_levels.shape[1]),
            "neg_elbo_bits_per_dim": bits_per_pixel(neg_elbo, len(test_levels), test_levels.shape[1])}
    print(variant, "test", json.dumps(test), flush=True)
    return {"epochs": epochs, "test": test}


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("decoder_calls", "decoder calls per image"), ("single_code_fraction", "images with a single code"),
              ("encoder_grad_norm", "encoder gradient norm (mean per update)"),
              ("neg_elbo_bits_per_dim", "-ELBO, bits per pixel (training)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6))
    for ax, (key, title) in zip(axes, panels):
        for variant, result in results.items():
            rows = [r for r in result["epochs"] if key in r]
            if rows:
                ax.plot([r["epoch"] for r in rows], [r[key] for r in rows], marker="o", label=variant)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
        if key == "encoder_grad_norm":
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def run(args):
    """The experiment on ``args`` (the script's options, checked)."""
    images = load_images("mnist", args.data)
    if images.official_test is None:
        raise SystemExit(f"{args.data}: needs the full MNIST's IDX files (train-images-idx3-ubyte.gz, ...)")
    train_count = len(images.levels) - images.official_test
    if not 0 < args.images <= train_count:
        raise SystemExit(f"--images {args.images}: must be 1 to the {train_count} training images")
    if not 0 < args.test_images <= images.official_test:
        raise SystemExit(f"--test-images {args.test_images}: must be 1 to the {images.official_test} test images")
    levels = images.levels[:args.images]
    test_levels = images.levels[train_count:train_count + args.test_images]
    results = {variant: train(variant, levels, test_levels, args) for variant in VARIANTS}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "support.json").write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()},
                                                       "results": results}, indent=1), encoding="utf-8")
    plot(results, args.out / "support.png")
    print(f"written: {args.out / 'support.json'}, {args.out / 'support.png'}")
