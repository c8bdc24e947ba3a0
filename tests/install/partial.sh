#!/usr/bin/env bash
# Installs from a fully built tree as if only part of it had been built (issue 30): the files
# of the targets a partial build would not have made are moved aside for the install (mv
# keeps their times: ninja does not rebuild them) and put back afterwards. Two cases:
#  1. only `cudakit` built (the README's consumer build): lib, headers and CMake package
#     install, no Python package; a find_package consumer builds and runs (run.sh);
#  2. what the README's showcase builds (cudakit_python, no cudakit_alloc): the Python package
#     installs without its allocator plug-in and imports from the prefix.
# Not a ctest: moving the files would race with tests that use them. scripts/dev.sh test runs it.
# usage: partial.sh BUILD_DIR PY_INSTALL_DIR PYTHON
set -euo pipefail
build=$1; pydir=$2; python=$3; here=$(cd "$(dirname "$0")" && pwd)
aside=$(mktemp -d)
moved=()
restore() { for f in "${moved[@]}"; do mv "$aside/$(basename "$f")" "$f"; done; moved=(); }
trap 'restore; rm -rf "$aside"' EXIT
hide() { for f in "$@"; do [ -e "$f" ] && { mv "$f" "$aside/"; moved+=("$f"); }; done; }
ext=("$build"/python/cudakit/_C*.so) plugin="$build/python/cudakit/libcudakit_alloc.so"

echo "-- install after building only the cudakit target"
hide "${ext[@]}" "$plugin"
out=$(mktemp -d); trap 'restore; rm -rf "$aside" "$out"' EXIT
CUDAKIT_INSTALL_PREFIX_OUT="$out" "$here/run.sh" "$build" "$pydir"
[ -f "$out/prefix/include/cudakit/cudakit.hpp" ] || { echo "headers not installed" >&2; exit 1; }
if [ -e "$out/prefix/$pydir/cudakit" ]; then
  echo "a Python package without its extension was installed: $out/prefix/$pydir/cudakit" >&2; exit 1
fi
restore; rm -rf "$out/prefix"

echo "-- install after building what the showcase builds (no cudakit_alloc)"
hide "$plugin"
CUDAKIT_INSTALL_PREFIX_OUT="$out" CUDAKIT_INSTALL_NO_PLUGIN=1 "$here/run.sh" "$build" "$pydir" "$python"
[ ! -e "$out/prefix/$pydir/cudakit/libcudakit_alloc.so" ] || { echo "plug-in appeared" >&2; exit 1; }
echo "partial installs ok"
