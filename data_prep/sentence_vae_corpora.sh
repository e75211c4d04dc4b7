#!/usr/bin/env bash
# Yelp, Yahoo! Answers and DBpedia as labelled sentence corpora for the sentence VAEs
# (Prokhorov et al. 2021): the CSV releases of Zhang, Zhao & LeCun (2015), verified
# by the md5 sums torchtext publishes for them, then data_prep/prepare_sentence_vae.py.
#   bash data_prep/sentence_vae_corpora.sh OUT_DIR [yelp] [yahoo] [dbpedia]   (default: all three)
# Leaves OUT_DIR/NAME/{train,valid,test}.txt, ready for
#   fairseq-train OUT_DIR/NAME --task sentence_vae ...
# Per class: TRAIN_PER_CLASS (10000), VALID_PER_CLASS (1000), TEST_PER_CLASS (1000).
# Offline: MIRROR=DIR holding the archives under their release names.
# VERIFY=0 skips the md5 check (only for mirrors of other files, such as the tests').
set -euo pipefail
OUT=${1:?usage: sentence_vae_corpora.sh OUT_DIR [yelp] [yahoo] [dbpedia]}
shift
CORPORA=${*:-yelp yahoo dbpedia}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/fetch.sh"
DRIVE=https://drive.usercontent.google.com/download

for corpus in $CORPORA; do
  case "$corpus" in
    yelp) archive=yelp_review_full_csv; id=0Bz8a_Dbh9QhbZlU4dXhHTFhZQU0; md5=f7ddfafed1033f68ec72b9267863af6c ;;
    yahoo) archive=yahoo_answers_csv; id=0Bz8a_Dbh9Qhbd2JNdDBsQUdocVU; md5=f3f9899b997a42beb24157e62e3eea8d ;;
    dbpedia) archive=dbpedia_csv; id=0Bz8a_Dbh9QhbQ2Vic1kxMmZZQ1k; md5=dca7b1ae12b1091090db52aa7ec5ca64 ;;
    *) echo "sentence_vae_corpora.sh: unknown corpus '$corpus' (yelp, yahoo, dbpedia)" >&2; exit 2 ;;
  esac
  sum="md5:$md5"
  [ "${VERIFY:-1}" = 0 ] && sum=""
  fetch "$DRIVE?id=$id&export=download&confirm=t" "$OUT/downloads" "$sum" "$archive.tar.gz"
  if [ ! -f "$OUT/downloads/$archive/test.csv" ]; then
    unpack "$OUT/downloads/$archive.tar.gz" "$OUT/downloads"
  fi
  "$(project_python)" "$HERE/prepare_sentence_vae.py" "$corpus" "$OUT/downloads/$archive" "$OUT/$corpus" \
    --train-per-class "${TRAIN_PER_CLASS:-10000}" --valid-per-class "${VALID_PER_CLASS:-1000}" \
    --test-per-class "${TEST_PER_CLASS:-1000}"
done
