#!/usr/bin/env bash
# Multi30k task 1 en-de: raw captions -> joint sentencepiece (8k) -> fairseq binary.
#   bash data_prep/multi30k.sh OUT_DIR [RAW_DIR]
# RAW_DIR defaults to ../shared/data/mt/multi30k-en-de; when it is not given and that
# does not exist, the official release (github.com/multi30k/dataset) is downloaded into
# OUT_DIR/raw.  A RAW_DIR given without the release's files is an error, never replaced.
set -euo pipefail
OUT=${1:?usage: multi30k.sh OUT_DIR [RAW_DIR]}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ $# -ge 2 ]; then
  RAW=$2
  for f in train.en train.de val.en val.de test_2016_flickr.en test_2016_flickr.de; do
    [ -f "$RAW/$f" ] || { echo "multi30k.sh: RAW_DIR $RAW has no $f (it needs the release's train, val and test_2016_flickr .en/.de files)" >&2; exit 2; }
  done
else
  RAW=$HERE/../../shared/data/mt/multi30k-en-de
fi
if [ ! -f "$RAW/train.en" ]; then
  RAW=$OUT/raw
  mkdir -p "$RAW"
  BASE=https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw
  for f in train.en train.de val.en val.de test_2016_flickr.en test_2016_flickr.de; do
    curl -fsSL "$BASE/$f.gz" | gunzip > "$RAW/$f"
  done
fi
. "$HERE/fetch.sh"
"$(project_python)" "$HERE/prepare_translation.py" --raw "$RAW" --src en --tgt de --out "$OUT" \
  --train train --valid val --test test_2016_flickr --vocab-size 8000
