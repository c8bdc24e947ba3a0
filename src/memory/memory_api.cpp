// include/cudakit/memory.hpp: statistics, controls, raw alloc/delete, IPC.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "backend/device_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "instrument/stream_lifetime.hpp"
#include "memory/deferred_free.hpp"
#include "memory/device_allocator.hpp"
#include "memory/host_allocator.hpp"
#include "memory/pluggable.hpp"
#include "memory/raw.hpp"

namespace cudakit {

using memory::device_allocator;

namespace {
int dev_of(int device) { return memory::resolve_alloc_device(device); }

void put_stat(std::map<std::string, std::int64_t>& m, const std::string& prefix,
              const MemoryStat& s) {
  m[prefix + ".current"] = s.current;
  m[prefix + ".peak"] = s.peak;
  m[prefix + ".allocated"] = s.allocated;
  m[prefix + ".freed"] = s.freed;
}
}  // namespace

MemoryStats memory_stats_of(int device) {
  memory::drain_deferred_frees();  // so a synchronised caller sees host functions' frees
  const int d = dev_of(device);
  MemoryStats s = device_allocator(d).stats();
  if (auto* p = memory::plugged_allocator()) p->add_stats(d, s);
  return s;
}

namespace {
// memory_stats()' keys with the offset of their counter in MemoryStats, built once in the
// key order (std::map's byte order = Python's str order = torch's sorted OrderedDict).
std::vector<MemoryStatField> build_stat_fields() {
  static const MemoryStats proto{};
  const char* base = reinterpret_cast<const char*>(&proto);
  std::map<std::string, std::size_t> m;
  auto put = [&](const std::string& key, const std::int64_t& v) {
    m[key] = static_cast<std::size_t>(reinterpret_cast<const char*>(&v) - base);
  };
  auto put_stat = [&](const std::string& prefix, const MemoryStat& st) {
    put(prefix + ".current", st.current);
    put(prefix + ".peak", st.peak);
    put(prefix + ".allocated", st.allocated);
    put(prefix + ".freed", st.freed);
  };
  const MemoryStats& s = proto;
  const std::pair<const char*, const MemoryStat*> arrays[] = {
      {"allocation", s.allocation},         {"segment", s.segment},
      {"active", s.active},                 {"inactive_split", s.inactive_split},
      {"allocated_bytes", s.allocated_bytes}, {"reserved_bytes", s.reserved_bytes},
      {"active_bytes", s.active_bytes},     {"inactive_split_bytes", s.inactive_split_bytes},
      {"requested_bytes", s.requested_bytes}};
  for (auto [name, arr] : arrays)
    for (int i = 0; i < kNumStatPools; ++i)
      put_stat(std::string(name) + "." + kStatPoolNames[i], arr[i]);
  put("num_alloc_retries", s.num_alloc_retries);
  put("num_ooms", s.num_ooms);
  put("num_sync_all_streams", s.num_sync_all_streams);
  put("num_device_alloc", s.num_device_alloc);
  put("num_device_free", s.num_device_free);
  put("max_split_size", s.max_split_size);
  put_stat("oversize_allocations", s.oversize_allocations);
  put_stat("oversize_segments", s.oversize_segments);
  put("sleep.pool_bytes", s.sleep.pool_bytes);
  put("sleep.asleep_bytes", s.sleep.asleep_bytes);
  put("sleep.offloaded_bytes", s.sleep.offloaded_bytes);
  put("sleep.num_sleeps", s.sleep.num_sleeps);
  put("sleep.num_wake_ups", s.sleep.num_wake_ups);
  for (int c = 0; c < kNumMemoryClients; ++c) {
    const std::string prefix = std::string("framework.") + kMemoryClientNames[c] + ".";
    put_stat(prefix + "allocation", s.by_client[c].allocation);
    put_stat(prefix + "allocated_bytes", s.by_client[c].allocated_bytes);
    put_stat(prefix + "requested_bytes", s.by_client[c].requested_bytes);
  }
  std::vector<MemoryStatField> out;
  out.reserve(m.size());
  for (auto& [key, off] : m) out.push_back({key, off});
  return out;
}
}  // namespace

const std::vector<MemoryStatField>& memory_stat_fields() {
  static const std::vector<MemoryStatField> fields = build_stat_fields();
  return fields;
}

std::map<std::string, std::int64_t> memory_stats(int device) {
  const MemoryStats s = memory_stats_of(device);
  std::map<std::string, std::int64_t> m;
  for (const MemoryStatField& f : memory_stat_fields()) m.emplace(f.key, f.value(s));
  return m;
}

std::size_t memory_allocated(int device) {
  memory::drain_deferred_frees();  // so a synchronised caller sees host functions' frees
  const int d = dev_of(device);
  auto n = device_allocator(d).allocated_bytes_now();
  if (auto* p = memory::plugged_allocator()) {
    MemoryStats s{};
    p->add_stats(d, s);
    n += s.allocated_bytes[0].current;
  }
  return static_cast<std::size_t>(n);
}
std::size_t max_memory_allocated(int device) {
  return static_cast<std::size_t>(memory_stats_of(device).allocated_bytes[0].peak);
}
std::size_t memory_reserved(int device) {
  return static_cast<std::size_t>(memory_stats_of(device).reserved_bytes[0].current);
}
std::size_t max_memory_reserved(int device) {
  return static_cast<std::size_t>(memory_stats_of(device).reserved_bytes[0].peak);
}
void reset_peak_memory_stats(int device) { device_allocator(dev_of(device)).reset_peak_stats(); }
void reset_accumulated_memory_stats(int device) {
  device_allocator(dev_of(device)).reset_accumulated_stats();
}
void reset_max_memory_allocated(int device) { reset_peak_memory_stats(device); }
void reset_max_memory_cached(int device) { reset_peak_memory_stats(device); }

namespace {
std::string fmt_size(std::int64_t sz, double pref) {
  const char* prefixes[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (i < 5 && pref >= 768 * 1024) {
    sz /= 1024;
    pref /= 1024;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%6lld %s", static_cast<long long>(sz), prefixes[i]);
  return buf;
}
std::string fmt_count(std::int64_t c, double pref) {
  const char* prefixes[] = {" ", "K", "M"};
  int i = 0;
  while (i < 2 && pref >= 750 * 1000) {
    c /= 1000;
    pref /= 1000;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%7lld %s ", static_cast<long long>(c), prefixes[i]);
  return buf;
}
}  // namespace

std::string memory_summary(int device, bool abbreviated) {
  const int d = dev_of(device);
  const MemoryStats s = memory_stats_of(d);
  std::string out;
  auto line = [&](const std::string& l) { out += "|" + l + "|\n"; };
  char buf[256];
  line(std::string(75, '='));
  std::snprintf(buf, sizeof buf, " %16s cudakit CUDA memory summary, device ID %-17d ", "", d);
  line(buf);
  line(std::string(75, '-'));
  std::snprintf(buf, sizeof buf, "  %9s CUDA OOMs: %-12lld | %6s cudaMalloc retries: %-8lld  ", "",
                static_cast<long long>(s.num_ooms), "", static_cast<long long>(s.num_alloc_retries));
  line(buf);
  line(std::string(75, '='));
  line("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");
  struct Row {
    const MemoryStat* arr;
    const char* name;
    bool bytes;
  };
  const Row rows[] = {{s.allocated_bytes, "Allocated memory", true},
                      {s.active_bytes, "Active memory", true},
                      {s.requested_bytes, "Requested memory", true},
                      {s.reserved_bytes, "GPU reserved memory", true},
                      {s.inactive_split_bytes, "Non-releasable memory", true},
                      {s.allocation, "Allocations", false},
                      {s.active, "Active allocs", false},
                      {s.segment, "GPU reserved segments", false},
                      {s.inactive_split, "Non-releasable allocs", false}};
  for (const Row& r : rows) {
    line(std::string(75, '-'));
    const std::pair<int, const char*> subs[] = {
        {0, r.name}, {2, "      from large pool"}, {1, "      from small pool"}};
    const MemoryStat& ref = r.arr[0];
    for (int k = 0; k < (abbreviated ? 1 : 3); ++k) {
      const MemoryStat& st = r.arr[subs[k].first];
      auto f = [&](std::int64_t v, std::int64_t p) {
        return r.bytes ? fmt_size(v, double(p)) : fmt_count(v, double(p));
      };
      std::snprintf(buf, sizeof buf, " %-21s | %s | %s | %s | %s ", subs[k].second,
                    f(st.current, ref.current).c_str(), f(st.peak, ref.peak).c_str(),
                    f(st.allocated, ref.allocated).c_str(), f(st.freed, ref.freed).c_str());
      line(buf);
    }
  }
  for (auto [st, name] : {std::pair{&s.oversize_allocations, "Oversize allocations"},
                          std::pair{&s.oversize_segments, "Oversize GPU segments"}}) {
    line(std::string(75, '-'));
    std::snprintf(buf, sizeof buf, " %-21s | %s | %s | %s | %s ", name,
                  fmt_count(st->current, double(st->current)).c_str(),
                  fmt_count(st->peak, double(st->peak)).c_str(),
                  fmt_count(st->allocated, double(st->allocated)).c_str(),
                  fmt_count(st->freed, double(st->freed)).c_str());
    line(buf);
  }
  line(std::string(75, '='));
  return out;
}

void empty_cache() {
  memory::drain_deferred_frees();
  for (memory::DeviceAllocator* a : memory::existing_allocators()) a->empty_cache();
}

void set_per_process_memory_fraction(double fraction, int device) {
  device_allocator(dev_of(device)).set_memory_fraction(fraction);
}
double get_per_process_memory_fraction(int device) {
  return device_allocator(dev_of(device)).memory_fraction();
}

std::string get_allocator_backend() {
  return memory::settings_in_force().backend == memory::AllocatorConfig::Backend::driver_async
             ? "cudaMallocAsync" : "native";
}

void set_allocator_settings(const std::string& conf) { memory::apply_allocator_settings(conf); }

void* caching_allocator_alloc(std::size_t bytes, int device, std::optional<StreamRef> stream) {
  const int d = dev_of(device);
  if (stream && stream->device() >= 0 && stream->device() != d)  // as allocate_device
    throw ValueError("caching_allocator_alloc: stream belongs to device " + std::to_string(stream->device()) +
                     " but memory was requested on device " + std::to_string(d) +
                     ": pass a stream of the same device");
  if (bytes == 0) return nullptr;
  detail::StreamHandle h = stream ? stream->handle() : current_stream(d).handle();
  return memory::raw_alloc(bytes, d, h);
}

void* caching_allocator_alloc_for(MemoryClient client, std::size_t bytes, int device,
                                  std::optional<StreamRef> stream) {
  const int d = dev_of(device);
  if (stream && stream->device() >= 0 && stream->device() != d)
    throw ValueError("caching_allocator_alloc_for: stream belongs to device " +
                     std::to_string(stream->device()) + " but memory was requested on device " +
                     std::to_string(d) + ": pass a stream of the same device");
  const auto c = static_cast<std::uint8_t>(client);
  if (c >= kNumMemoryClients)
    throw ValueError("caching_allocator_alloc_for: unknown client " + std::to_string(c) +
                     " (accepted: MemoryClient::cudakit, torch, cupy)");
  if (bytes == 0) return nullptr;
  detail::StreamHandle h = stream ? stream->handle() : current_stream(d).handle();
  return memory::raw_alloc_for(c, bytes, d, h);
}

void caching_allocator_delete(void* ptr) {
  if (!ptr) return;
  if (!memory::raw_free(ptr, -1))
    throw ValueError("caching_allocator_delete: pointer is not a live allocation of cudakit's "
                     "caching allocator (double free, or memory from another allocator)");
}

void stream_retiring(StreamRef stream) noexcept {
  int device = stream.device();
  if (device < 0) {
    try {
      device = current_device();
    } catch (...) {
      return;
    }
  }
  instrument::stream_retiring(stream.handle(), device);
}

void caching_allocator_enable(bool enabled) { memory::set_caching_enabled(enabled); }
bool caching_allocator_enabled() noexcept { return memory::caching_enabled(); }

std::optional<AllocationInfo> allocation_info(const void* ptr) {
  AllocationInfo out;
  for (memory::DeviceAllocator* a : memory::existing_allocators())
    if (a->info(ptr, out)) return out;
  return std::nullopt;
}

std::vector<GpuProcess> gpu_processes(int device) {
  std::vector<GpuProcess> out;
  for (auto& p : detail::device_ops().gpu_processes(dev_of(device)))
    out.push_back(GpuProcess{p.pid, p.used_bytes});
  return out;
}

std::string list_gpu_processes(int device) {
  const int d = dev_of(device);
  std::string out = "GPU:" + std::to_string(d) + "\n";
  std::vector<GpuProcess> procs;
  try {
    procs = gpu_processes(d);
  } catch (const NotSupportedError& e) {
    return out + "process listing unavailable: " + e.what();
  }
  if (procs.empty()) return out + "no processes are running";
  for (const GpuProcess& p : procs) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "process %10d uses %12.3f MB GPU memory\n", p.pid,
                  double(p.used_bytes) / (1024.0 * 1024.0));
    out += buf;
  }
  out.pop_back();
  return out;
}

// ---- host ----
std::map<std::string, std::int64_t> host_memory_stats() {
  const memory::HostMemoryStats s = memory::host_allocator().stats();
  std::map<std::string, std::int64_t> m;
  put_stat(m, "allocations", s.allocations);
  put_stat(m, "allocated_bytes", s.allocated_bytes);
  put_stat(m, "segment", s.segment);
  put_stat(m, "reserved_bytes", s.reserved_bytes);
  put_stat(m, "active_requests", s.active_requests);
  put_stat(m, "active_bytes", s.active_bytes);
  m["num_host_alloc"] = s.num_host_alloc;
  m["num_host_free"] = s.num_host_free;
  for (auto [name, d] : {std::pair{"host_alloc_time", &s.host_alloc_time},
                         std::pair{"host_free_time", &s.host_free_time}}) {
    std::string p = name;
    m[p + ".total"] = d->total;
    m[p + ".max"] = d->max;
    m[p + ".min"] = d->min;
    m[p + ".count"] = d->count;
    m[p + ".avg"] = d->count ? d->total / d->count : 0;
  }
  return m;
}
void reset_accumulated_host_memory_stats() { memory::host_allocator().reset_accumulated(); }
void reset_peak_host_memory_stats() { memory::host_allocator().reset_peak(); }
void host_empty_cache() { memory::host_allocator().empty_cache(); }

}  // namespace cudakit
