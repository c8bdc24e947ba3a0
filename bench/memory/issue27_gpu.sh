#!/usr/bin/env bash
# Issue 27 on the H200 (device tool; after scripts/gpu-check.sh's build step, STEPS=build):
#   bench/memory/issue27_gpu.sh TRACES_DIR OUTDIR [design|holdout|all]
# 1. torch's expandable-segment bugs as regression tests on the cuda backend, and the chunk
#    boundary test under compute-sanitizer memcheck (#196209);
# 2. the issue-27 table (replay_table.py) on the cuda backend with replay times of cudakit's
#    default against torch's default mode (--time; torch in the same run).
# TRACES_DIR: the recorded traces (bench/memory/traces/issue27: 20 real workloads). One
# half per call keeps a call under the device tool's 10 minutes.
set -uo pipefail
TR=${1:?usage: issue27_gpu.sh TRACES_DIR OUTDIR [design|holdout|all]}
OUT=${2:?usage: issue27_gpu.sh TRACES_DIR OUTDIR [design|holdout|all]}
HALF=${3:-all}
cd "$(dirname "$0")/../.."
BUILD=${BUILD_DIR:-build-gpu}
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$OUT"
cmake --build "$BUILD" --target memory_replay cudakit_python test_memory_torch_bugs > "$OUT/build.log" 2>&1 ||
  { tail -20 "$OUT/build.log"; exit 1; }
CUDAKIT_BACKEND=cuda timeout 300 "$BUILD/tests/test_memory_torch_bugs" > "$OUT/torch_bugs_cuda.log" 2>&1
echo "test_memory_torch_bugs (cuda): rc $?"
CUDAKIT_BACKEND=cuda timeout 300 compute-sanitizer --tool memcheck --error-exitcode 1 \
  "$BUILD/tests/test_memory_torch_bugs" --gtest_filter='*196209*' > "$OUT/memcheck.log" 2>&1
echo "compute-sanitizer memcheck, chunk boundaries: rc $?"
CUDAKIT_BACKEND=cuda PYTHONPATH="$BUILD/python" timeout 480 python3 bench/memory/replay_table.py \
  "$TR" --half "$HALF" --replay "$BUILD/bench/memory/memory_replay" --conf "" \
  --conf expandable_segments:False --time --markdown 2>&1 | tee "$OUT/issue27_table.md"
