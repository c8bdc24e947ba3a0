#!/usr/bin/env bash
# Copies the committed tree (HEAD) into .device-carry/cudakit for the device tool, so that
# other engineers' uncommitted work in the checkout never reaches the GPU build.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .device-carry/cudakit && mkdir -p .device-carry/cudakit
git archive HEAD | tar -x -C .device-carry/cudakit
git rev-parse --short HEAD > .device-carry/cudakit/COMMIT
# Allocation traces (shared/ does not travel with the checkout).
mkdir -p .device-carry/cudakit/traces
cp ../shared/traces/*.trace.gz .device-carry/cudakit/traces/ 2>/dev/null || true
cp bench/memory/traces/*.trace.gz .device-carry/cudakit/traces/ 2>/dev/null || true
echo "packed $(cat .device-carry/cudakit/COMMIT)"
