# Shared by the download pipelines: source it, then `fetch URL DIR [CHECKSUM] [NAME]`.
#
# Puts URL's file in DIR under its own name, or NAME where the URL has none (Google
# Drive's download links).  With MIRROR set to a directory that
# holds a file of that name, it is copied from there instead (offline runs, tests).
# Downloads resume: an interrupted one leaves NAME.part, which the next run
# continues (curl -C -) instead of starting over.  With CHECKSUM (a sha256, or
# md5:HEX where the release publishes only md5) the file is verified and a
# mismatch stops the pipeline, naming the file; a file already present and
# verified is not fetched again.
checksum_ok() {
  local sum=$1 file=$2
  case "$sum" in
    md5:*) echo "${sum#md5:}  $file" | md5sum -c --status ;;
    *) echo "$sum  $file" | sha256sum -c --status ;;
  esac
}

fetch() {
  local url=$1 dir=$2 sha=${3:-} name=${4:-}
  [ -n "$name" ] || name=$(basename "${url%%\?*}")
  mkdir -p "$dir"
  if [ -f "$dir/$name" ] && { [ -z "$sha" ] || checksum_ok "$sha" "$dir/$name"; }; then
    echo "[fetch] $name: already here"
    return 0
  fi
  if [ -n "${MIRROR:-}" ] && [ -f "$MIRROR/$name" ]; then
    echo "[fetch] $name: from mirror $MIRROR"
    cp "$MIRROR/$name" "$dir/$name.part"
  else
    echo "[fetch] $name: downloading $url"
    curl -fL --retry 3 -C - -o "$dir/$name.part" "$url" || {
      echo "[fetch] download of $url failed; rerun to resume from $dir/$name.part" >&2
      return 1
    }
  fi
  if [ -n "$sha" ] && ! checksum_ok "$sha" "$dir/$name.part"; then
    local tool=sha256sum
    [ "${sha#md5:}" != "$sha" ] && tool=md5sum
    echo "[fetch] $dir/$name: ${tool%sum} is $($tool "$dir/$name.part" | cut -d' ' -f1), expected ${sha#md5:}" >&2
    mv "$dir/$name.part" "$dir/$name.bad"
    return 1
  fi
  mv "$dir/$name.part" "$dir/$name"
}

# Unpack a .tgz/.tar.gz into DIR, failing with the archive's name if it is damaged.
unpack() {
  local archive=$1 dir=$2
  mkdir -p "$dir"
  tar -xzf "$archive" -C "$dir" || { echo "[unpack] $archive is not a readable gzip tar archive" >&2; return 1; }
}

# The project's Python (scripts/setup_env.sh) unless PYTHON says otherwise.
project_python() {
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"
  elif [ -x "$here/../.venv/bin/python" ]; then echo "$here/../.venv/bin/python"
  else echo python; fi
}
