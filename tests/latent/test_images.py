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
    shared_levels, shared_labels, _ = load_images("mnist", mnist)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", images[:20], 2051)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", shared_labels[:20].numpy(), 2049)
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images[20:], 2051)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", shared_labels[20:30].numpy(), 2049)
    levels, labels, num_levels = load_images("mnist", tmp_path)
    assert num_levels == 256 and levels.shape == (30, 784)
    assert torch.equal(levels, shared_levels[:30]) and torch.equal(labels, shared_labels[:30])
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", shared_labels[20:29].numpy(), 2049)
    with pytest.raises(ValueError, match="t10k-images-idx3-ubyte.gz has 10 images but .*t10k-labels-idx1-ubyte.gz "
                                         "has 9 labels"):
        load_images("mnist", tmp_path)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", shared_labels[20:30].numpy(), 2051)
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.gz: not an IDX label file"):
        load_images("mnist", tmp_path)


def test_digits_and_splits():
    levels, labels, num_levels = load_images("digits", None)
    assert levels.shape == (1797, 64) and num_levels == 17 and int(levels.max()) == 16
    parts = deterministic_splits(1797, 0)
    assert [len(parts[s]) for s in ("train", "valid", "test")] == [1439, 179, 179]
    assert torch.equal(torch.sort(torch.cat(list(parts.values()))).values, torch.arange(1797))
    assert torch.equal(parts["test"], deterministic_splits(1797, 0)["test"])
