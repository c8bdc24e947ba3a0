// Replays allocation traces (gzip; format in shared/traces/README.md) through cudakit's
// caching allocator under several configurations, and prints a table:
//   config | peak allocated | peak reserved | ratio (fragmentation) | device allocs | time.
//
// usage: memory_replay TRACE.gz [TRACE.gz ...] [--conf "expandable_segments:True"]...
//        default configurations: "" (the defaults: expandable segments) and
//        "expandable_segments:False" (the torch-compatible mode, mirroring c10's default).
// Runs on both backends (CUDAKIT_BACKEND=emulated needs CUDAKIT_EMULATED_MEMORY >= the
// trace's peak; the default 8 GiB is enough for the shipped trace).
// REPLAY_CALLS=1 adds a line per run with the device calls by kind.
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/stream.hpp"
#include "memory/config.hpp"
#include "memory/device_allocator.hpp"

using namespace cudakit;

namespace {

struct TraceEvent {
  bool alloc;
  std::uint64_t id;
  std::size_t bytes;
  std::uint64_t stream;
};

struct Trace {
  std::string name, header;
  std::vector<TraceEvent> events;
};

Trace load(const char* path) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", path);
    std::exit(2);
  }
  Trace t;
  t.name = path;
  if (auto slash = t.name.rfind('/'); slash != std::string::npos) t.name = t.name.substr(slash + 1);
  char line[512];
  while (gzgets(f, line, sizeof line)) {
    if (line[0] == '#') {
      t.header = line;
      continue;
    }
    TraceEvent e{};
    unsigned long long id = 0, bytes = 0, stream = 0;
    if (line[0] == 'a' && std::sscanf(line + 1, "%llu %llu %llu", &id, &bytes, &stream) >= 2) {
      e = TraceEvent{true, id, static_cast<std::size_t>(bytes), stream};
    } else if (line[0] == 'f' && std::sscanf(line + 1, "%llu", &id) == 1) {
      e = TraceEvent{false, id, 0, 0};
    } else {
      continue;
    }
    t.events.push_back(e);
  }
  gzclose(f);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<const char*> paths;
  std::vector<std::string> confs;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--conf") == 0 && i + 1 < argc) confs.push_back(argv[++i]);
    else paths.push_back(argv[i]);
  }
  if (paths.empty()) {
    std::fprintf(stderr, "usage: %s TRACE.gz... [--conf CONF]...\n", argv[0]);
    return 2;
  }
  if (confs.empty()) confs = {"", "expandable_segments:False"};
  detail::Backend& be = detail::backend();
  std::printf("backend: %s\n", be.name());
  // dev_ops: num_device_alloc + num_device_free (torch's counting: one per cudaMalloc /
  // cudaFree, or per map / unmap of a contiguous range of an expandable segment);
  // vm_calls: the driver calls behind the expandable ones (cuMemCreate, cuMemMap, one
  // cuMemSetAccess per run of chunks mapped, cuMemUnmap, cuMemRelease),
  // with the physical chunks created and the maps of reused chunks in brackets.
  std::printf("%-22s %-28s %14s %14s %7s %8s %19s %10s %9s\n", "trace", "config", "peak_alloc",
              "peak_reserved", "ratio", "dev_ops", "vm_calls(new/reuse)", "time_ms", "ns/op");
  for (const char* path : paths) {
    Trace t = load(path);
    for (const std::string& conf : confs) {
      memory::DeviceAllocator a(0, be, memory::AllocatorConfig::parse(conf));
      std::unordered_map<std::uint64_t, Stream> streams;  // trace stream value -> real stream
      std::unordered_map<std::uint64_t, void*> live;
      live.reserve(t.events.size());
      // Create the streams up front so stream creation is not timed.
      for (const TraceEvent& e : t.events)
        if (e.alloc && e.stream && !streams.count(e.stream)) streams.emplace(e.stream, Stream(0));
      auto handle_of = [&](std::uint64_t s) -> detail::StreamHandle {
        return s ? streams.at(s).handle() : nullptr;
      };
      // REPLAY_VERBOSE=1: one line per event that made expandable driver calls (perturbs the
      // timing: statistics are read there).
      const bool verbose = std::getenv("REPLAY_VERBOSE") != nullptr;
      std::uint64_t seen = 0;
      std::size_t index = 0;
      std::int64_t live_bytes = 0;
      std::unordered_map<std::uint64_t, std::size_t> live_size;
      const auto t0 = std::chrono::steady_clock::now();
      for (const TraceEvent& e : t.events) {
        if (e.alloc) {
          live[e.id] = reinterpret_cast<void*>(a.malloc(e.bytes, handle_of(e.stream))->ptr);
          if (verbose) live_size[e.id] = e.bytes, live_bytes += e.bytes;
        } else if (auto it = live.find(e.id); it != live.end()) {
          a.free(it->second);
          live.erase(it);
          if (verbose) live_bytes -= live_size[e.id];
        }
        ++index;
        if (verbose) {
          const memory::VmCallCounts& vc = a.vm_calls();
          const std::uint64_t now = vc.map + vc.unmap;
          if (now != seen) {
            auto st = a.stats();
            std::printf("  event %zu %s %zu: maps %llu unmaps %llu reserved %.1f MiB live %.1f MiB ops %lld\n",
                        index, e.alloc ? "alloc" : "free", e.bytes,
                        static_cast<unsigned long long>(vc.map.load()),
                        static_cast<unsigned long long>(vc.unmap.load()),
                        double(st.reserved_bytes[0].current) / 1048576.0, double(live_bytes) / 1048576.0,
                        static_cast<long long>(st.num_device_alloc + st.num_device_free));
            seen = now;
          }
        }
      }
      const auto t1 = std::chrono::steady_clock::now();
      auto s = a.stats();
      const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
      const memory::VmCallCounts& vc = a.vm_calls();
      const unsigned long long vm = vc.create + vc.map + vc.access + vc.unmap + vc.destroy;
      char vmbuf[48];
      std::snprintf(vmbuf, sizeof vmbuf, "%llu(%llu/%llu)", vm,
                    static_cast<unsigned long long>(vc.create.load()),
                    static_cast<unsigned long long>(vc.reused.load()));
      std::printf("%-22s %-28s %14lld %14lld %7.3f %8lld %19s %10.2f %9.1f\n", t.name.c_str(),
                  conf.empty() ? "default" : conf.c_str(),
                  static_cast<long long>(s.allocated_bytes[0].peak),
                  static_cast<long long>(s.reserved_bytes[0].peak),
                  double(s.reserved_bytes[0].peak) / double(std::max<std::int64_t>(1, s.allocated_bytes[0].peak)),
                  static_cast<long long>(s.num_device_alloc + s.num_device_free), vmbuf, ms,
                  ms * 1e6 / double(t.events.size()));
      // REPLAY_CALLS=1: the device calls by kind (what the expcalls work counts against
      // torch's): cudaMalloc / cudaFree of plain segments (dev_ops of a non-expandable run),
      // and each kind of driver call behind expandable segments.
      if (std::getenv("REPLAY_CALLS")) {
        const bool es = a.settings().expandable_segments;  // the default is expandable too
        // Plain segments: all of them without expandable segments; with them, the small
        // pool's (it keeps 2 MiB segments, device_allocator.cpp grow()).
        const long long ops =
            es ? static_cast<long long>(s.segment[1].allocated + s.segment[1].freed)
               : static_cast<long long>(s.num_device_alloc + s.num_device_free);
        std::printf("    calls: malloc+free %lld | create %llu map %llu (reused %llu) access %llu "
                    "unmap %llu destroy %llu | total %llu\n",
                    ops, static_cast<unsigned long long>(vc.create.load()),
                    static_cast<unsigned long long>(vc.map.load()),
                    static_cast<unsigned long long>(vc.reused.load()),
                    static_cast<unsigned long long>(vc.access.load()),
                    static_cast<unsigned long long>(vc.unmap.load()),
                    static_cast<unsigned long long>(vc.destroy.load()),
                    static_cast<unsigned long long>(ops) + vm);
      }
      if (std::getenv("REPLAY_POOLS"))
        std::printf("    small: alloc peak %lld reserved peak %lld | large: alloc peak %lld reserved peak %lld\n",
                    static_cast<long long>(s.allocated_bytes[1].peak), static_cast<long long>(s.reserved_bytes[1].peak),
                    static_cast<long long>(s.allocated_bytes[2].peak), static_cast<long long>(s.reserved_bytes[2].peak));
      for (auto& [id, p] : live) a.free(p);
      a.empty_cache();
    }
    if (!t.header.empty()) std::printf("  reference %s", t.header.c_str());
  }
  return 0;
}
