// Instruction counts of a recorded alloc/free pair, for callgrind (wall-clock benchmarks on
// shared cores are too noisy to see a 5 % change; instruction counts are exact):
//   valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \
//     build/bench/memory/history_pair_loop cpp 20000
//   callgrind_annotate /tmp/cg.out | head      (total Ir / 20000 = instructions per pair)
// Modes: off (no history), cpp ("all", context "all", C++ stacks, as bench_memory_alloc's
// PairWithHistory), nostacks ("all", no context: the trace ring only). The ring (100000
// entries, as the benchmark) is filled first, so the loop measures the steady state in which
// every entry overwrites the oldest one. Only the measured loop is instrumented.
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cudakit/allocation.hpp"
#include "cudakit/memory.hpp"

using namespace cudakit;

__attribute__((noinline)) static void pairs(int n) {
  for (int i = 0; i < n; ++i) {
    Allocation a = allocate_device(512);
    asm volatile("" ::"r"(a.get()) : "memory");
  }
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "cpp";
  const int n = argc > 2 ? std::atoi(argv[2]) : 20000;
  if (mode == "cpp") {
    record_memory_history("all", "all", "cpp", 100000);
  } else if (mode == "nostacks") {
    record_memory_history("all", "", "python", 100000);
  } else if (mode != "off") {
    std::fprintf(stderr, "usage: %s off|cpp|nostacks [pairs]\n", argv[0]);
    return 2;
  }
  pairs(60000);  // warm: caches, the intern table, a full ring (2 or 3 slots a pair)
  CALLGRIND_ZERO_STATS;
  CALLGRIND_START_INSTRUMENTATION;
  pairs(n);
  CALLGRIND_STOP_INSTRUMENTATION;
  record_memory_history(std::nullopt);
  std::printf("%s: %d pairs\n", mode.c_str(), n);
}
