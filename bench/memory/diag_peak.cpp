// Where the footprint goes at its peak (issue 27): replays a trace and, at the last rise of
// peak reserved, prints per pool kind and stream (Le = large expandable, Sp = small plain;
// s0, s1... in order of first appearance) the mapped, allocated and free bytes and a
// histogram of free block sizes (MiB buckets: 0 = < 1, 1 = [1, 2), 2 = [2, 4), ...).
// Statistics are read after every event, which drains the quick cache each time: the numbers
// are those of quick_cache:False (deterministic; the quick cache's slots hash stream handles,
// so multi-stream replays vary by ~0.03 from run to run).
//   cmake --build build --target memory_diag_peak   (not built by default)
//   CUDAKIT_BACKEND=emulated CUDAKIT_EMULATED_MEMORY=80GiB build/bench/memory/memory_diag_peak \
//     TRACE.gz [SETTINGS]
// DIAG_LAYOUT=1 adds each mapped run's blocks; DIAG_AT_ALLOC_PEAK=1 takes the snapshot at the
// allocated peak instead (the last event at it); the second line gives each pool's reserved
// bytes at that event either way.
// The "aligned-8MiB" column counts free bytes in 8 MiB-aligned windows of absolute
// addresses (a rough bound: chunks align to their segment's base, not to 8 MiB).
#include <zlib.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>
#include "backend/backend.hpp"
#include "cudakit/stream.hpp"
#include "memory/config.hpp"
#include "memory/device_allocator.hpp"
using namespace cudakit;
struct Ev { bool a; std::uint64_t id; std::size_t b; std::uint64_t s; };
int main(int argc, char** argv) {
  gzFile f = gzopen(argv[1], "rb");
  std::string conf = argc > 2 ? argv[2] : "";
  std::vector<Ev> ev; char line[512];
  while (gzgets(f, line, sizeof line)) {
    unsigned long long id = 0, bytes = 0, st = 0;
    if (line[0] == 'a' && std::sscanf(line + 1, "%llu %llu %llu", &id, &bytes, &st) >= 2) ev.push_back({true, id, bytes, st});
    else if (line[0] == 'f' && std::sscanf(line + 1, "%llu", &id) == 1) ev.push_back({false, id, 0, 0});
  }
  detail::Backend& be = detail::backend();
  memory::DeviceAllocator a(0, be, memory::AllocatorConfig::parse(conf));
  std::unordered_map<std::uint64_t, Stream> streams;
  std::map<void*, int> sname; int ns = 0;
  for (auto& e : ev) if (e.a && e.s && !streams.count(e.s)) streams.emplace(e.s, Stream(0));
  std::unordered_map<std::uint64_t, void*> live;
  const bool at_alloc = std::getenv("DIAG_AT_ALLOC_PEAK") != nullptr;
  // DIAG_AT_EVENT=N: the layout just before event N (1-based, as REPLAY_VERBOSE numbers them).
  const long at_event = std::getenv("DIAG_AT_EVENT") ? std::atol(std::getenv("DIAG_AT_EVENT")) : 0;
  std::int64_t last_peak = 0; std::vector<memory::SegmentInfo> snap; std::size_t at = 0;
  std::int64_t live_at = 0;
  struct { std::int64_t small_res = 0, large_res = 0, small_live = 0; } at_alloc_peak;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    auto& e = ev[i];
    if (e.a) live[e.id] = (void*)a.malloc(e.b, e.s ? streams.at(e.s).handle() : nullptr)->ptr;
    else if (auto it = live.find(e.id); it != live.end()) { a.free(it->second); live.erase(it); }
    auto s = a.stats();
    if (s.allocated_bytes[0].current == s.allocated_bytes[0].peak) {
      at_alloc_peak = {s.reserved_bytes[1].current, s.reserved_bytes[2].current, s.allocated_bytes[1].current};
      // DIAG_AT_ALLOC_PEAK=1: the layout at the allocated peak instead of the reserved one.
      if (at_alloc) snap = a.snapshot(), at = i, live_at = s.allocated_bytes[0].current;
    }
    if (at_event > 0) {
      if (static_cast<long>(i) + 2 == at_event) snap = a.snapshot(), at = i + 1, live_at = s.allocated_bytes[0].current;
      continue;
    }
    if (s.reserved_bytes[0].peak > last_peak + (1 << 20)) {
      last_peak = s.reserved_bytes[0].peak;
      if (!at_alloc) snap = a.snapshot(), at = i, live_at = s.allocated_bytes[0].current;
    }
  }
  auto s = a.stats();
  std::printf("peak alloc %.1f reserved %.1f MiB; snapshot at event %zu: reserved %.1f live %.1f\n",
              s.allocated_bytes[0].peak / 1048576.0, s.reserved_bytes[0].peak / 1048576.0, at,
              last_peak / 1048576.0, live_at / 1048576.0);
  std::printf("at the allocated peak: reserved small %.1f large %.1f MiB, small live %.1f\n",
              at_alloc_peak.small_res / 1048576.0, at_alloc_peak.large_res / 1048576.0,
              at_alloc_peak.small_live / 1048576.0);
  struct Agg { double mapped = 0, alloc = 0, freeb = 0, free8 = 0; int segs = 0; std::map<int,int> hist; };
  std::map<std::string, Agg> agg;
  for (auto& seg : snap) {
    if (!sname.count(seg.stream)) sname[seg.stream] = ns++;
    std::string k = std::string(seg.is_large ? "L" : "S") + (seg.is_expandable ? "e" : "p") + " s" + std::to_string(sname[seg.stream]);
    Agg& g = agg[k]; g.segs++;
    g.mapped += seg.total_size; g.alloc += seg.allocated_size;
    for (auto& b : seg.blocks) if (b.state != "active_allocated") {
      g.freeb += b.size;
      std::uintptr_t lo = (b.address + (8u << 20) - 1) / (8u << 20) * (8u << 20), hi = (b.address + b.size) / (8u << 20) * (8u << 20);
      if (hi > lo) g.free8 += hi - lo;
      int mb = (int)(b.size >> 20); int bucket = mb < 1 ? 0 : mb < 2 ? 1 : mb < 4 ? 2 : mb < 8 ? 4 : mb < 16 ? 8 : 16;
      g.hist[bucket]++;
    }
  }
  // DIAG_LAYOUT=1: every mapped run in address order, one token per block in address order
  // (A = allocated, f = free; its size in MiB), to see where the holes are.
  if (std::getenv("DIAG_LAYOUT")) {
    for (auto& seg : snap) {
      std::printf("%s%s s%d @%#lx %.1f MiB:", seg.is_large ? "L" : "S", seg.is_expandable ? "e" : "p",
                  sname[seg.stream], (unsigned long)seg.address, seg.total_size / 1048576.0);
      for (auto& b : seg.blocks)
        std::printf(" %c%.2f", b.state == "active_allocated" ? 'A' : 'f', b.size / 1048576.0);
      std::printf("\n");
    }
  }
  for (auto& [k, g] : agg) {
    std::printf("%-8s segs %3d mapped %7.1f alloc %7.1f free %6.1f (aligned-8MiB %6.1f) free hist:", k.c_str(), g.segs,
                g.mapped / 1048576, g.alloc / 1048576, g.freeb / 1048576, g.free8 / 1048576);
    for (auto& [b, n] : g.hist) std::printf(" %d:%d", b, n);
    std::printf("\n");
  }
}
