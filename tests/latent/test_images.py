"""Both MNIST layouts (the offline copy, the official IDX files) and their errors."""

import gzip

import numpy as np
import pytest
import torch

from fairseq_sparse.latent.images import deterministic_splits, load_images
from tests.conftest import shared_data


def write_idx(path, array, magic):
    header = magic.to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_official_idx_layout_reads_both_halves(tmp_path):
    mnist = shared_data("images", "mnist")
    images = np.load(mnist / "mnist.npz")["data"][:30]
    shared_levels, shared_labels, _, official = load_images("mnist", mnist)
    assert official is None
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", images[:20], 2051)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", shared_labels[:20].numpy(), 2049)
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images[20:], 2051)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", shared_labels[20:30].numpy(), 2049)
    levels, labels, num_levels, official = load_images("mnist", tmp_path)
    assert num_levels == 256 and levels.shape == (30, 784) and official == 10
    assert torch.equal(levels, shared_levels[:30]) and torch.equal(labels, shared_labels[:30])
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", shared_labels[20:29].numpy(), 2049)
    with pytest.raises(ValueError, match="t10k-images-idx3-ubyte.gz has 10 images but .*t10k-labels-idx1-ubyte.gz "
                                         "has 9 labels"):
        load_images("mnist", tmp_path)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", shared_labels[20:30].numpy(), 2051)
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.gz: not an IDX label file"):
        load_images("mnist", tmp_path)


def test_digits_and_splits():
    levels, labels, num_levels, official = load_images("digits", None)
    assert official is None
    assert levels.shape == (1797, 64) and num_levels == 17 and int(levels.max()) == 16
    parts = deterministic_splits(1797, 0)
    assert [len(parts[s]) for s in ("train", "valid", "test")] == [1439, 179, 179]
    assert torch.equal(torch.sort(torch.cat(list(parts.values()))).values, torch.arange(1797))
    assert torch.equal(parts["test"], deterministic_splits(1797, 0)["test"])


def test_full_mnist_keeps_its_official_split():
    """The full MNIST (IDX): 60,000 + 10,000, the official test half as the test set,
    10,000 seeded training images as validation, nothing shared or lost."""
    images = load_images("mnist", shared_data("images", "mnist-full"))
    assert images.levels.shape == (70_000, 784) and images.official_test == 10_000
    assert torch.bincount(images.labels[60_000:]).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    parts = deterministic_splits(70_000, 0, images.official_test)
    assert [len(parts[s]) for s in ("train", "valid", "test")] == [50_000, 10_000, 10_000]
    assert torch.equal(parts["test"], torch.arange(60_000, 70_000))
    assert torch.equal(torch.sort(torch.cat([parts["train"], parts["valid"]])).values, torch.arange(60_000))
    assert not torch.equal(parts["valid"], deterministic_splits(70_000, 1, 10_000)["valid"])
