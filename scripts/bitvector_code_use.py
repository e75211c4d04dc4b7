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
  images (--gradient-images), and the median |score| of their bits. Saturated scores
  (a one-code q) leave a relaxed sample with no slope and SparseMAP with none at all,
  so there this norm is near or exactly 0.

    python scripts/bitvector_code_use.py CHECKPOINT [CHECKPOINT ...] [--out table.md]
"""

import argparse
from pathlib import Path

from fairseq_sparse.latent.images import FULL_MNIST
from fairseq_sparse.latent.code_use import GRADIENT_IMAGES, code_use_table
from fairseq_sparse.latent.images import load_images


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", type=Path, help="fairseq checkpoints of --arch bitvector_vae")
    parser.add_argument("--data", type=Path, default=FULL_MNIST,
                        help="the full MNIST's IDX files")
    parser.add_argument("--images", type=int, default=10000, help="the first this many official test images")
    parser.add_argument("--gradient-images", type=int, default=GRADIENT_IMAGES,
                        help="the encoder's gradient and the median |score| on the first this many official "
                             "training images")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args(argv)
    for path in args.checkpoints:
        if not path.is_file():
            parser.error(f"{path}: no such checkpoint")
    for option, value in (("--images", args.images), ("--gradient-images", args.gradient_images)):
        if value < 1:
            parser.error(f"{option} {value}: must be positive")
    images = load_images("mnist", args.data)
    if images.official_test is None:
        parser.error(f"--data {args.data}: needs the official train/test IDX files")
    table = code_use_table(args.checkpoints, images, args.images, args.gradient_images)
    print(table)
    if args.out:
        args.out.write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
