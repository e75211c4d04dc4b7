#!/usr/bin/env bash
# MNIST and Fashion-MNIST: the official IDX files, verified by their published md5 sums.
#   bash data_prep/mnist.sh OUT_DIR
# Leaves OUT_DIR/mnist and OUT_DIR/fashion_mnist, each ready for
#   fairseq-train OUT_DIR/mnist --dataset mnist ...   (ssvae, signaling_game, bitvector_vae)
# Offline: MIRROR=DIR with DIR/mnist/ and DIR/fashion_mnist/ holding the same file names.
# VERIFY=0 skips the md5 check (only for mirrors of other files, such as the tests').
set -euo pipefail
OUT=${1:?usage: mnist.sh OUT_DIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # the read-back below runs from the repository
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/fetch.sh"
MNIST_URL=${MNIST_URL:-https://ossci-datasets.s3.amazonaws.com/mnist}
FASHION_URL=${FASHION_URL:-http://fashion-mnist.s3-website.eu-central-1.amazonaws.com}
ROOT_MIRROR=${MIRROR:-}

get() {  # get SET URL FILE MD5
  local sum="md5:$4"
  [ "${VERIFY:-1}" = 0 ] && sum=""
  MIRROR=${ROOT_MIRROR:+$ROOT_MIRROR/$1} fetch "$2/$3" "$OUT/$1" "$sum"
}

get mnist "$MNIST_URL" train-images-idx3-ubyte.gz f68b3c2dcbeaaa9fbdd348bbdeb94873
get mnist "$MNIST_URL" train-labels-idx1-ubyte.gz d53e105ee54ea40749a09fcbcd1e9432
get mnist "$MNIST_URL" t10k-images-idx3-ubyte.gz 9fb629c4189551a2d022fa330f9573f3
get mnist "$MNIST_URL" t10k-labels-idx1-ubyte.gz ec29112dd5afa0611ce80d1b7f02629c
get fashion_mnist "$FASHION_URL" train-images-idx3-ubyte.gz 8d4fb7e6c68d591d4c3dfef9ec88bf0d
get fashion_mnist "$FASHION_URL" train-labels-idx1-ubyte.gz 25c81989df183df01b3e8a0aad5dffbe
get fashion_mnist "$FASHION_URL" t10k-images-idx3-ubyte.gz bef4ecab320f06d8554ea6380940ec79
get fashion_mnist "$FASHION_URL" t10k-labels-idx1-ubyte.gz bb300cfdad3c16e7a12a480ee83cd310

# Read every set back as the tasks will (this also checks the IDX headers and counts), in
# one process: importing the tasks' package takes most of its time.
(cd "$HERE/.." && "$(project_python)" -c "
import sys
from fairseq_sparse.latent.images import load_images
for directory, name in zip(sys.argv[1::2], sys.argv[2::2]):
    images = load_images('mnist', directory)
    print(f'[mnist.sh] {name}: {len(images.levels)} images of {images.levels.shape[1]} pixels '
          f'({images.official_test} the official test set), {int(images.labels.max()) + 1} classes')
" "$OUT/mnist" mnist "$OUT/fashion_mnist" fashion_mnist)
