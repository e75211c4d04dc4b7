"""data_prep/mnist.sh against local mirrors: the md5 check (the real MNIST label file
passes, anything else is named), and the prepared sets read back by the tasks."""

import gzip
import subprocess

import numpy as np

from tests.conftest import REPO, pipeline_env, shared_data


def write_idx(path, array, magic):
    path.parent.mkdir(parents=True, exist_ok=True)
    header = magic.to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def mirror_of_real_images(mirror):
    mnist = shared_data("images", "mnist")
    images = np.load(mnist / "mnist.npz")["data"]
    with gzip.open(mnist / "t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read()[8:], dtype=np.uint8)
    for name, part in (("mnist", slice(0, 60)), ("fashion_mnist", slice(60, 100))):
        write_idx(mirror / name / "train-images-idx3-ubyte.gz", images[part][:30], 2051)
        write_idx(mirror / name / "train-labels-idx1-ubyte.gz", labels[part][:30], 2049)
        write_idx(mirror / name / "t10k-images-idx3-ubyte.gz", images[part][30:], 2051)
        write_idx(mirror / name / "t10k-labels-idx1-ubyte.gz", labels[part][30:], 2049)
    return mnist


def run(out, mirror, **env):
    return subprocess.run(["bash", str(REPO / "data_prep" / "mnist.sh"), str(out)], capture_output=True, text=True,
                          env=pipeline_env(MIRROR=mirror, PATH="/usr/bin:/bin", **env))


def test_mnist_pipeline_verifies_and_prepares(tmp_path):
    mirror = tmp_path / "mirror"
    mnist = mirror_of_real_images(mirror)
    # The official label file is the real one: its md5 passes; the rebuilt image file does not.
    (mirror / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes((mnist / "t10k-labels-idx1-ubyte.gz").read_bytes())
    proc = run(tmp_path / "out", mirror)
    assert proc.returncode != 0
    assert "train-images-idx3-ubyte.gz: md5 is" in proc.stderr and "expected f68b3c2dcbeaaa9fbdd348bbdeb94873" in proc.stderr
    # With verification off, both sets are prepared and read back as the tasks read them.
    for name in ("mnist", "fashion_mnist"):
        (mirror / name / "t10k-labels-idx1-ubyte.gz").unlink()
    mirror_of_real_images(mirror)
    proc = run(tmp_path / "out2", mirror, VERIFY="0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[mnist.sh] mnist: 60 images of 784 pixels (30 the official test set), 10 classes" in proc.stdout
    assert "[mnist.sh] fashion_mnist: 40 images of 784 pixels" in proc.stdout
    # A rerun finds everything in place and downloads nothing.
    again = run(tmp_path / "out2", tmp_path / "empty", VERIFY="0")
    assert again.returncode == 0 and again.stdout.count("already here") == 8
