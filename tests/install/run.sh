#!/usr/bin/env bash
# Installs cudakit from BUILD_DIR into a temporary prefix, then
#  1. builds and runs a consumer that uses find_package(cudakit CONFIG);
#  2. (when PYTHON is given) imports the installed Python package from the prefix alone, in a
#     fresh process with no build tree on the path and no LD_LIBRARY_PATH, runs an op and
#     finds the allocator plug-in library.
# usage: run.sh BUILD_DIR PY_INSTALL_DIR [PYTHON]
# Environment (tests/install/partial.sh): CUDAKIT_INSTALL_PREFIX_OUT=DIR installs into
# DIR/prefix and keeps it; CUDAKIT_INSTALL_NO_PLUGIN=1 expects no allocator plug-in.
set -euo pipefail
build=$1; pydir=$2; python=${3:-}; src=$(cd "$(dirname "$0")" && pwd)
if [ -n "${CUDAKIT_INSTALL_PREFIX_OUT:-}" ]; then
  tmp=$CUDAKIT_INSTALL_PREFIX_OUT; rm -rf "$tmp/consumer"
else
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fi
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# The README's C++ snippet is built and run too, so it cannot rot.
awk '/^```cpp$/{on=1; next} /^```$/{on=0} on' "$src/../../README.md" > "$tmp/readme_snippet.cpp"
cmake -S "$src" -B "$tmp/consumer" -G Ninja -DREADME_SNIPPET="$tmp/readme_snippet.cpp" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib64:${LD_LIBRARY_PATH:-}" "$tmp/consumer/consumer"
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib64:${LD_LIBRARY_PATH:-}" "$tmp/consumer/readme_snippet"
if [ -n "$python" ]; then
  cd "$tmp"  # not the source tree: `import cudakit` must come from the prefix
  env -u LD_LIBRARY_PATH PYTHONPATH="$tmp/prefix/$pydir" "$python" - "$tmp/prefix" \
      "${CUDAKIT_INSTALL_NO_PLUGIN:-0}" <<'PY'
import os, sys
import cudakit
prefix = os.path.realpath(sys.argv[1])
assert os.path.realpath(cudakit.__file__).startswith(prefix), cudakit.__file__
if sys.argv[2] == "1":  # installed without the plug-in: plugin_path() names the target
    try:
        cudakit.memory.plugin_path()
        raise AssertionError("plugin_path() found a plug-in that was not built")
    except RuntimeError as e:
        assert "cudakit_alloc" in str(e), e
else:
    assert os.path.exists(cudakit.memory.plugin_path()), cudakit.memory.plugin_path()
if cudakit.is_available():
    x = cudakit.ones(4)
    assert float((x + x).sum().cpu().numpy()) == 8.0
print("installed python package ok:", cudakit.__file__)
PY
fi
