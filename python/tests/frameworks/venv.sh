#!/usr/bin/env bash
# Builds (once per pinned set) the frameworks tier's venv and prints its path.
#
#   python/tests/frameworks/venv.sh [WHEEL]
#
# The venv lives in ~/.cache/mooncake-rs/frameworks-venv-<hash of the pins>
# (or $MOONCAKE_FRAMEWORKS_VENV), so a machine builds it once: about 5 GB,
# most of it torch's CUDA libraries (PyPI's torch for Linux is a CUDA build;
# it runs on CPU here). WHEEL, when given, is (re)installed into it: the
# mooncake_rs wheel under test. Progress goes to stderr; stdout is the path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
hash="$(cat "$here/requirements.txt" "$here/frameworks.txt" | sha256sum | cut -c1-12)"
venv="${MOONCAKE_FRAMEWORKS_VENV:-$HOME/.cache/mooncake-rs/frameworks-venv-$hash}"
# pip retries each download (a registry hiccup), and a build that fails
# anyway is tried once more from scratch before the caller is told.
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check --retries 10 --timeout 60)
build() {
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" &&
    "${pip[@]}" -r "$here/requirements.txt" >&2 &&
    "${pip[@]}" --no-deps -r "$here/frameworks.txt" >&2
}
if [ "$(cat "$venv/.complete" 2>/dev/null)" != "$hash" ]; then
  echo "frameworks venv: building $venv (torch and the frameworks, about 5 GB)" >&2
  if ! build; then
    echo "frameworks venv: the build failed; trying once more from scratch" >&2
    build || { echo "frameworks venv: could not be built (see pip's errors above)" >&2; exit 1; }
  fi
  echo "$hash" > "$venv/.complete"
  echo "frameworks venv: built" >&2
fi
if [ $# -gt 0 ]; then
  "${pip[@]}" --force-reinstall --no-deps "$1" >&2
fi
echo "$venv"
