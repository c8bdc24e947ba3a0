// Instruction counts of the mixed live set (bench_memory_alloc's Mixed, one thread), split into
// what runs under the device mutex and what runs outside it, for callgrind:
//   valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file=/tmp/in.out \
//     build/bench/memory/mixed_loop locked 20000        (only the device-mutex sections)
//   valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/all.out \
//     build/bench/memory/mixed_loop all 20000           (everything in the measured loop)
//   callgrind_annotate /tmp/in.out | head    (total Ir / steps = instructions per step)
// Why: under 8 threads every slow-path operation serialises on the device mutex (issue 31),
// so the instructions inside it bound the aggregate rate; wall-clock on the 2-core
// development machine cannot show that, instruction counts are exact.
//
// How the locked sections are found without touching the library: this program defines
// pthread_mutex_lock / pthread_mutex_unlock, which the statically linked allocator binds to,
// and toggles callgrind's collection when an adaptive mutex (the device mutex's kind,
// locks.hpp) is taken or given back. With device_mutex_spin:False in CUDAKIT_ALLOC_CONF the
// mutex is a plain one and nothing is collected. The fast lock's own sections (the quick
// cache's hit paths, which take only the spin lock) are not counted as locked; the program
// prints how many steps took them.
#include <dlfcn.h>
#include <pthread.h>
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cudakit/allocation.hpp"
#include "cudakit/memory.hpp"
#include "mixed_live_set.hpp"

using namespace cudakit;

namespace {
bool g_measuring = false;   // during the measured loop
bool g_toggle = false;      // "locked" mode, during the measured loop
int g_depth = 0;            // adaptive mutexes held by this (single) thread
long g_sections = 0;        // device-mutex sections entered while measuring

using LockFn = int (*)(pthread_mutex_t*);
LockFn real(const char* name) {
  return reinterpret_cast<LockFn>(dlsym(RTLD_NEXT, name));
}
bool adaptive(pthread_mutex_t* m) {
#if defined(__GLIBC__)
  return m->__data.__kind == PTHREAD_MUTEX_ADAPTIVE_NP;
#else
  return false;
#endif
}
}  // namespace

extern "C" int pthread_mutex_lock(pthread_mutex_t* m) {
  static const LockFn fn = real("pthread_mutex_lock");
  const int r = fn(m);
  if (g_measuring && adaptive(m) && g_depth++ == 0) {
    ++g_sections;
    if (g_toggle) CALLGRIND_TOGGLE_COLLECT;
  }
  return r;
}

extern "C" int pthread_mutex_unlock(pthread_mutex_t* m) {
  static const LockFn fn = real("pthread_mutex_unlock");
  if (g_measuring && adaptive(m) && --g_depth == 0 && g_toggle) CALLGRIND_TOGGLE_COLLECT;
  return fn(m);
}

__attribute__((noinline)) static void steps(const MixedLiveSet& w, std::vector<Allocation>& live,
                                           std::size_t& k, long n) {
  for (long i = 0; i < n; ++i) {
    const std::size_t j = k++ & (MixedLiveSet::kSteps - 1);
    live[w.index[j]] = allocate_device(w.size[j]);
  }
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  const long n = argc > 2 ? std::atol(argv[2]) : 20000;
  if (mode != "all" && mode != "locked") {
    std::fprintf(stderr, "usage: %s all|locked [steps]\n", argv[0]);
    return 2;
  }
  const MixedLiveSet w(0);
  std::vector<Allocation> live;
  for (std::size_t s : w.initial) live.push_back(allocate_device(s));
  std::size_t k = 0;
  steps(w, live, k, 3 * MixedLiveSet::kSteps);  // warm: segments grown, caches settled
  if (mode == "all") {
    CALLGRIND_ZERO_STATS;
    CALLGRIND_START_INSTRUMENTATION;
    g_measuring = true;
    steps(w, live, k, n);
    g_measuring = false;
    CALLGRIND_STOP_INSTRUMENTATION;
  } else {
    CALLGRIND_ZERO_STATS;
    g_measuring = g_toggle = true;
    steps(w, live, k, n);
    g_measuring = g_toggle = false;
  }
  std::printf("%s: %ld steps, %ld device-mutex sections (%.2f a step)\n", mode.c_str(), n,
              g_sections, static_cast<double>(g_sections) / static_cast<double>(n));
}
