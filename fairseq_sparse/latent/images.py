"""Digit and MNIST-format images for the latent-variable experiments.

``digits``: scikit-learn's bundled 8x8 digits (1,797 images, 17 grey levels,
no download).  ``mnist``: a directory in one of two layouts:

- the offline copy in ``../shared/data/images/mnist``: ``mnist.npz`` (``data``:
  N x 28 x 28 uint8) and ``t10k-labels-idx1-ubyte.gz``;
- the official IDX files (``{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz``: the full
  MNIST of ``../shared/data/images/mnist-full``, or what ``data_prep/mnist.sh`` leaves,
  MNIST or Fashion-MNIST).

The official files keep their own split: the t10k half is the test set, and a seeded
``OFFICIAL_VALID`` (10,000) of the training half is the validation set (MNIST's usual
50,000 / 10,000 / 10,000).  Any other set is split deterministically (a permutation by
a seed) into train / valid / test, 80 / 10 / 10%.
"""

import gzip
import math
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np
import torch
from fairseq.data import FairseqDataset

from ..configs import data_path

OFFICIAL_VALID = 10_000
# The full official MNIST (IDX files) in the shared data (configs.data_path).
FULL_MNIST = data_path("images", "mnist-full")


def bits_per_pixel(nats, images, pixels):
    """A total in nats over ``images`` images of ``pixels`` pixels, as bits per pixel."""
    return nats / images / pixels / math.log(2)


class Images(NamedTuple):
    levels: torch.Tensor  # (N, pixels) long
    labels: torch.Tensor  # (N,) long
    num_levels: int  # grey levels
    official_test: Optional[int] = None  # the last this many images are an official test half


def _read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise ValueError(f"{path}: not an IDX {'image' if magic == 2051 else 'label'} file (magic number {found})")
    if magic == 2049:
        return np.frombuffer(raw[8:], dtype=np.uint8)
    n, rows, cols = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    return np.frombuffer(raw[16:], dtype=np.uint8).reshape(n, rows * cols)


def _check_aligned(images, labels, images_path, labels_path):
    if len(images) != len(labels):
        raise ValueError(f"{images_path} has {len(images)} images but {labels_path} has {len(labels)} labels")


def load_images(dataset, data_dir):
    """:class:`Images` of ``dataset`` (``digits`` or ``mnist`` read from ``data_dir``)."""
    if dataset == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        return Images(torch.tensor(digits.data, dtype=torch.long), torch.tensor(digits.target, dtype=torch.long), 17)
    if dataset != "mnist":
        raise ValueError(f"--dataset {dataset!r}: choose digits or mnist")
    directory = Path(data_dir)
    official = [directory / f"{half}-{kind}-ubyte.gz" for half in ("train", "t10k")
                for kind in ("images-idx3", "labels-idx1")]
    if all(p.is_file() for p in official):
        parts = []
        for images_path, labels_path in (official[:2], official[2:]):
            images, labels = _read_idx(images_path, 2051), _read_idx(labels_path, 2049)
            _check_aligned(images, labels, images_path, labels_path)
            parts.append((images, labels))
        images = np.concatenate([p[0] for p in parts])
        labels = np.concatenate([p[1] for p in parts])
        official_test = len(parts[1][0])
    else:
        official_test = None
        images_path, labels_path = directory / "mnist.npz", directory / "t10k-labels-idx1-ubyte.gz"
        for path in (images_path, labels_path):
            if not path.is_file():
                raise FileNotFoundError(f"--dataset mnist: {path} is missing (DATA_DIR should be "
                                        "../shared/data/images/mnist, a copy of it, or a directory "
                                        "prepared by data_prep/mnist.sh)")
        images = np.load(images_path)["data"]
        images = images.reshape(len(images), -1)
        labels = _read_idx(labels_path, 2049)
        _check_aligned(images, labels, images_path, labels_path)
    # astype makes a fresh array, which the tensor takes over (torch.tensor would copy it again).
    return Images(torch.from_numpy(images.astype(np.int64)), torch.from_numpy(labels.astype(np.int64)), 256,
                  official_test)


def deterministic_splits(n, seed, official_test=None):
    """{"train", "valid", "test"} -> indices.  With ``official_test`` the last that many are
    the test set and a seeded ``OFFICIAL_VALID`` of the others (at most a sixth of them)
    the validation set; otherwise a seeded permutation cut 80 / 10 / 10%."""
    generator = torch.Generator().manual_seed(seed)
    if official_test is not None:
        train_half = n - official_test
        order = torch.randperm(train_half, generator=generator)
        valid = min(OFFICIAL_VALID, train_half // 6)
        return {"test": torch.arange(train_half, n), "valid": order[:valid], "train": order[valid:]}
    order = torch.randperm(n, generator=generator)
    tenth = n // 10
    return {"test": order[:tenth], "valid": order[tenth:2 * tenth], "train": order[2 * tenth:]}


class ImageDataset(FairseqDataset):
    """Images (any per-example tensors, aligned) with labels and a mask of which labels
    the model may see."""

    def __init__(self, images, labels, labelled, shuffle):
        self.images, self.labels, self.labelled, self.shuffle = images, labels, labelled, shuffle
        self.sizes = np.ones(len(images), dtype=np.int64)

    def __getitem__(self, index):
        return {"id": index, "image": self.images[index], "label": self.labels[index],
                "labelled": self.labelled[index]}

    def __len__(self):
        return len(self.images)

    def collater(self, samples):
        if not samples:
            return {}
        return {"id": torch.tensor([s["id"] for s in samples]), "nsentences": len(samples), "ntokens": len(samples),
                "net_input": {"images": torch.stack([s["image"] for s in samples])},
                "labels": torch.stack([s["label"] for s in samples]),
                "labelled": torch.stack([s["labelled"] for s in samples])}

    def num_tokens(self, index):
        return 1

    def size(self, index):
        return 1

    def ordered_indices(self):
        return np.random.permutation(len(self)) if self.shuffle else np.arange(len(self))
