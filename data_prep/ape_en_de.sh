#!/usr/bin/env bash
# English-German APE data (IT domain, phrase-based MT), as Correia & Martins (2019) trained on:
#   bash data_prep/ape_en_de.sh OUT_DIR
# Real triplets: WMT16 APE (LINDAT 11372/LRT-1632: 12K train, 1K dev, test 2016), and,
# where their archive links are given, WMT17 APE (11K more training triplets, test 2017)
# and WMT18 APE (test 2018): WMT17_APE_URLS / WMT18_APE_URLS, space-separated (LINDAT
# asks to accept the licence in a browser; copy the links it then shows).
# Artificial triplets, ARTIFICIAL=amu (default: AMU's 4M + 500K, Junczys-Dowmunt &
# Grundkiewicz 2016), escape (eSCAPE en-de, Negri et al. 2018: give ESCAPE_URLS from
# http://hltshare.fbk.eu/QT21/eSCAPE.html) or none.  Real training data is repeated
# OVERSAMPLE (20) times.  Leaves OUT_DIR/{train,valid,test,test2016,...}.{src,mt,pe}:
#   fairseq-sparse-ape-binarize --bert-model BERT --raw OUT_DIR --destdir OUT_DIR/bin
# None of these releases publishes checksums: each archive must unpack and every
# triplet must be line-aligned (prepare_ape.py names the file and line otherwise).
# Downloads resume; offline, MIRROR=DIR holds DIR/RELEASE/ARCHIVE (RELEASE: 2016, 2017,
# 2018, amu, escape).
set -euo pipefail
OUT=${1:?usage: ape_en_de.sh OUT_DIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/fetch.sh"
ROOT_MIRROR=${MIRROR:-}
LINDAT=https://lindat.mff.cuni.cz/repository/xmlui/bitstream/handle/11372
WMT16_APE_URLS=${WMT16_APE_URLS:-$LINDAT/LRT-1632/TrainDev.zip $LINDAT/LRT-1632/Test.zip $LINDAT/LRT-1632/test_pe.zip}
AMU_URLS=${AMU_URLS:-http://odkrywka.wmi.amu.edu.pl/static/data/ape/data.tgz}
ARTIFICIAL=${ARTIFICIAL:-amu}

release() {  # release NAME URL... : fetch and unpack into OUT/orig/NAME (once)
  local name=$1 url archive
  shift
  for url in "$@"; do
    archive="$OUT/downloads/$name/$(basename "${url%%\?*}")"
    MIRROR=${ROOT_MIRROR:+$ROOT_MIRROR/$name} fetch "$url" "$OUT/downloads/$name"
    [ -f "$archive.unpacked" ] && continue
    case "$archive" in
      *.zip) "$(project_python)" -m zipfile -e "$archive" "$OUT/orig/$name" 2>/dev/null \
               || { echo "[unpack] $archive is not a readable zip archive" >&2; return 1; } ;;
      *) unpack "$archive" "$OUT/orig/$name" ;;
    esac
    touch "$archive.unpacked"
  done
}

# shellcheck disable=SC2086  # the URL lists split on spaces
release 2016 $WMT16_APE_URLS
real=("$OUT/orig/2016")
for year in 2017 2018; do
  var=WMT${year#20}_APE_URLS
  if [ -n "${!var:-}" ]; then
    release "$year" ${!var}
    real+=("$OUT/orig/$year")
  else
    echo "[ape_en_de] WMT${year#20} APE: $var not set, so it is left out" >&2
  fi
done
artificial=()
case "$ARTIFICIAL" in
  amu) release amu $AMU_URLS; artificial=("$OUT/orig/amu") ;;
  escape)
    [ -n "${ESCAPE_URLS:-}" ] || { echo "[ape_en_de] ARTIFICIAL=escape needs ESCAPE_URLS (links from http://hltshare.fbk.eu/QT21/eSCAPE.html)" >&2; exit 2; }
    release escape $ESCAPE_URLS; artificial=("$OUT/orig/escape") ;;
  none) ;;
  *) echo "[ape_en_de] ARTIFICIAL=$ARTIFICIAL: use amu, escape or none" >&2; exit 2 ;;
esac
"$(project_python)" "$HERE/prepare_ape.py" "$OUT" --real "${real[@]}" ${artificial[@]:+--artificial "${artificial[@]}"} \
  --oversample "${OVERSAMPLE:-20}"
