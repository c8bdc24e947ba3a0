// The layout of an exported trace, shared by every output format: which events a finished
// trace becomes, on which process / thread rows, with which args (Kineto's layout, what
// torch.profiler writes; see chrome_trace.hpp). The Emitter walks the trace once and feeds a
// writer (Out): the JSON writer (json_writer.hpp), the TraceEvent builder behind
// Trace::events() (chrome_trace.cpp) or the Perfetto protobuf writer (perfetto_trace.cpp),
// so every format and the in-memory list agree event for event.
//
// Out's interface: begin(ph, cat, name, pid, tid, ts_ns, dur_ns) opens an event, then
// arg / arg_u / arg_d / arg_f / arg_s / arg_b / arg_dims (cudakit's literal keys), ann
// (annotation entries, user keys), memo (args that repeat: the writer may copy them), end();
// flow(ph, id, pid, tid, ts_ns) writes a flow event right after the event it belongs to.
#pragma once

#include <cxxabi.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "profiler/occupancy.hpp"
#include "profiler/trace_data.hpp"

namespace cudakit::profiler::detail {
namespace layout {

using cudakit::detail::kNoStream;
using cudakit::detail::SyncKind;

// Kineto's row offset for "Stream Sync" events (kSyncStreamTidOffset), so waits do not
// overlap the stream's kernels.
constexpr std::int64_t kSyncRowOffset = 1000000;
// Kineto sorts device processes after the host's (kExceedMaxPid-style offset).
constexpr std::int64_t kDeviceSortOffset = 5000000;
constexpr std::uint8_t kFlowStart = TraceData::kFlowStart, kFlowEnd = TraceData::kFlowEnd;

inline const char* sync_name(std::uint8_t kind) {
  switch (static_cast<SyncKind>(kind)) {
    case SyncKind::event_synchronize: return "Event Sync";
    case SyncKind::stream_wait_event: return "Stream Wait Event";
    case SyncKind::stream_synchronize: return "Stream Sync";
    case SyncKind::context_synchronize: return "Context Sync";
    default: return "Unknown Sync";
  }
}

inline const char* copy_kind_name(std::uint8_t k) {  // CUpti_ActivityMemcpyKind
  static const char* names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
  return k < std::size(names) ? names[k] : "Unknown";
}

inline const char* memory_kind_name(std::uint8_t k) {  // CUpti_ActivityMemoryKind
  static const char* names[] = {"Unknown", "Pageable",      "Pinned",        "Device",
                                "Array",   "Managed",       "Device Static", "Managed Static"};
  return k < std::size(names) ? names[k] : "Unknown";
}

inline std::int64_t host_tid(const ActivityRecord& r) { return static_cast<std::int64_t>(r.stream); }

inline std::int64_t device_tid(const ActivityRecord& r) {
  return r.stream == kNoStream ? 0 : static_cast<std::int64_t>(r.stream);
}

template <class Out>
class Emitter {
 public:
  Emitter(const TraceData& d, Out& out) : d_(d), out_(out) {}

  void run() {
    metadata();
    for (std::size_t i = 0; i < d_.records.size(); ++i) {
      flow_ = d_.flow.empty() ? 0 : d_.flow[i];
      record(*d_.records[i]);
    }
    for (const GpuSpan& s : d_.gpu_spans) {
      out_.begin('X', "gpu_user_annotation", s.range->name ? s.range->name : "", s.device,
                 s.stream == kNoStream ? 0 : s.stream, rel(s.start_ns), s.end_ns - s.start_ns);
      out_.end();
    }
  }

 private:
  std::int64_t rel(std::int64_t t) const { return t - d_.base_ns; }

  template <std::size_t N>
  void meta(const char* name, std::int64_t pid, std::int64_t tid, const char (&key)[N],
            std::string_view value) {
    out_.begin('M', "", name, pid, tid, 0, 0);
    out_.arg_s(key, value);
    out_.end();
  }
  template <std::size_t N>
  void meta_n(const char* name, std::int64_t pid, std::int64_t tid, const char (&key)[N],
              std::int64_t value) {
    out_.begin('M', "", name, pid, tid, 0, 0);
    out_.arg(key, value);
    out_.end();
  }

  void metadata() {
    const std::int64_t pid = d_.pid;
    meta("process_name", pid, 0, "name", d_.process_name);
    meta("process_labels", pid, 0, "labels", "CPU");
    meta_n("process_sort_index", pid, 0, "sort_index", pid);
    for (const auto& [tid, comm] : d_.thread_names) {
      meta("thread_name", pid, tid, "name",
           "thread " + std::to_string(tid) + (comm.empty() ? "" : " (" + comm + ")"));
      meta_n("thread_sort_index", pid, tid, "sort_index", tid);
    }
    std::set<std::pair<int, std::int64_t>> rows;  // (device, tid) rows the trace uses
    std::set<int> devices;
    for (const ActivityRecord* r : d_.records) {
      switch (r->kind) {
        case ActivityKind::kernel:
        case ActivityKind::memcpy:
        case ActivityKind::memset:
        case ActivityKind::stream_created:
        case ActivityKind::stream_destroyed:
          rows.emplace(r->device, device_tid(*r));
          devices.insert(r->device);
          break;
        case ActivityKind::sync:
          rows.emplace(r->device, sync_tid(*r));
          devices.insert(r->device);
          break;
        case ActivityKind::memory:
          if (r->device >= 0) devices.insert(r->device);
          break;
        default:
          break;
      }
    }
    for (const GpuSpan& s : d_.gpu_spans) rows.emplace(s.device, s.stream);
    for (const auto& [dev, props] : d_.devices) devices.insert(dev);
    for (int dev : devices) {
      if (dev < 0) continue;
      meta("process_name", dev, 0, "name", d_.process_name);
      auto it = d_.devices.find(dev);
      meta("process_labels", dev, 0, "labels",
           "GPU " + std::to_string(dev) +
               (it != d_.devices.end() && !it->second.name.empty() ? " (" + it->second.name + ")"
                                                                   : ""));
      meta_n("process_sort_index", dev, 0, "sort_index", kDeviceSortOffset + dev);
    }
    for (const auto& [dev, tid] : rows) {
      if (dev < 0) continue;
      std::string name;
      if (tid == 0) {
        name = "device sync";
      } else if (tid >= kSyncRowOffset) {
        name = "stream " + std::to_string(tid - kSyncRowOffset) + " (sync)";
      } else {
        name = "stream " + std::to_string(tid);
      }
      meta("thread_name", dev, tid, "name", name);
      meta_n("thread_sort_index", dev, tid, "sort_index", tid);
    }
  }

  static std::int64_t sync_tid(const ActivityRecord& r) {
    if (r.stream == kNoStream) return 0;
    if (static_cast<SyncKind>(r.detail) == SyncKind::stream_synchronize) {
      return kSyncRowOffset + r.stream;
    }
    return r.stream;
  }

  const std::string& kernel_name(const char* raw) {
    if (raw == last_kernel_ && last_kernel_name_) return *last_kernel_name_;  // loops repeat
    last_kernel_ = raw;
    last_kernel_name_ = &demangled(raw);
    return *last_kernel_name_;
  }
  const std::string& demangled(const char* raw) {
    auto it = demangled_.find(raw);
    if (it != demangled_.end()) return it->second;
    std::string name = raw ? raw : "kernel";
    if (raw && raw[0] == '_' && raw[1] == 'Z') {
      int status = 0;
      char* dm = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
      if (status == 0 && dm) name = dm;
      std::free(dm);
    }
    return demangled_.emplace(raw, std::move(name)).first->second;
  }

  const std::string& copy_name(const ActivityRecord& r) {
    const unsigned key = (unsigned(r.kind) << 24) | (unsigned(r.detail) << 16) |
                         (unsigned(r.u.copy.src_kind) << 8) | r.u.copy.dst_kind;
    auto it = copy_names_.find(key);
    if (it != copy_names_.end()) return it->second;
    std::string name =
        r.kind == ActivityKind::memcpy
            ? std::string("Memcpy ") + copy_kind_name(r.detail) + " (" +
                  memory_kind_name(r.u.copy.src_kind) + " -> " +
                  memory_kind_name(r.u.copy.dst_kind) + ")"
            : std::string("Memset (") + memory_kind_name(r.u.copy.src_kind) + ")";
    return copy_names_.emplace(key, std::move(name)).first->second;
  }

  const DeviceProperties* props(int device) const {
    auto it = d_.devices.find(device);
    return it == d_.devices.end() ? nullptr : &it->second;
  }

  // Per kernel shape (device + launch configuration): its launch statistics and, once
  // written, its args as JSON. A model's step cycles through a few dozen shapes, a loop
  // repeats one (checked first, without hashing).
  struct Shape {
    Occupancy occ;
    std::string json;  // JsonOut::memo's bytes; "" until written
  };
  using ShapeKey = std::array<char, sizeof(std::int32_t) + sizeof(ActivityRecord::Kernel)>;
  struct ShapeHash {
    std::size_t operator()(const ShapeKey& k) const noexcept {
      return std::hash<std::string_view>{}(std::string_view(k.data(), k.size()));
    }
  };
  Shape& shape(const ActivityRecord& r) {
    ShapeKey key;
    const std::int32_t device = r.device;
    std::memcpy(key.data(), &device, sizeof device);
    std::memcpy(key.data() + sizeof device, &r.u.kernel, sizeof r.u.kernel);
    if (last_shape_ && *last_shape_key_ == key) return *last_shape_;
    auto [it, inserted] = shapes_.try_emplace(key);
    if (inserted) {
      const auto& k = r.u.kernel;
      const DeviceProperties* p = props(r.device);
      const KernelShape ks{{k.grid[0], k.grid[1], k.grid[2]},
                           {k.block[0], k.block[1], k.block[2]},
                           k.shared_bytes,
                           k.registers};
      it->second.occ = p ? kernel_occupancy(*p, ks) : Occupancy{};
    }
    last_shape_key_ = &it->first;  // map nodes do not move
    last_shape_ = &it->second;
    return it->second;
  }

  // Annotation of a graph node (null when none): its keys replace the event's own args of
  // the same name (args.update(annotation), the seed's join).
  const graph_annotations::Annotation* annotation(std::uint64_t node_id) const {
    if (node_id == 0 || d_.annotations.empty()) return nullptr;
    auto it = d_.annotations.find(node_id);
    return it == d_.annotations.end() ? nullptr : &it->second;
  }
  static bool overridden(const graph_annotations::Annotation* a, std::string_view key) {
    if (!a) return false;
    for (const auto& kv : *a) {
      if (kv.first == key) return true;
    }
    return false;
  }
  void annotation_args(const graph_annotations::Annotation* a) {
    if (!a) return;
    for (const auto& [k, v] : *a) out_.ann(k, v);
  }

  void shape_args(const ActivityRecord& r, const Occupancy& occ,
                  const graph_annotations::Annotation* ann) {
    auto a = [&](std::string_view k) { return !overridden(ann, k); };
    if (a("registers per thread")) out_.arg_u("registers per thread", r.u.kernel.registers);
    if (a("shared memory")) out_.arg("shared memory", r.u.kernel.shared_bytes);
    // floats, as Kineto writes them (shorter than doubles, same information)
    if (a("blocks per SM")) out_.arg_f("blocks per SM", static_cast<float>(occ.blocks_per_sm));
    if (a("warps per SM")) out_.arg_f("warps per SM", static_cast<float>(occ.warps_per_sm));
    if (a("grid")) out_.arg_dims("grid", r.u.kernel.grid);
    if (a("block")) out_.arg_dims("block", r.u.kernel.block);
    if (a("est. achieved occupancy %")) {
      out_.arg("est. achieved occupancy %", occ.achieved_percent);
    }
  }

  void device_work(const ActivityRecord& r) {
    const graph_annotations::Annotation* ann = annotation(r.id);
    auto a = [&](std::string_view k) { return !overridden(ann, k); };
    const std::int64_t pid = r.device, tid = device_tid(r), ts = rel(r.start_ns);
    const std::int64_t dur = r.end_ns - r.start_ns;
    if (r.kind == ActivityKind::kernel) {
      out_.begin('X', "kernel", kernel_name(r.name), pid, tid, ts, dur);
      if (a("device")) out_.arg("device", r.device);
      if (a("stream")) out_.arg("stream", tid);
      if (a("correlation")) out_.arg_u("correlation", r.correlation);
      Shape& sh = shape(r);
      // The shape's args are the same for every kernel of that shape: without an annotation
      // (which may drop some) they are written once per shape and copied after that (two
      // float conversions and seven keys per kernel: -25% on the 1M-event trace).
      if (ann) {
        shape_args(r, sh.occ, ann);
      } else {
        out_.memo(sh.json, [&] { shape_args(r, sh.occ, nullptr); });
      }
    } else {
      const bool copy = r.kind == ActivityKind::memcpy;
      out_.begin('X', copy ? "gpu_memcpy" : "gpu_memset", copy_name(r), pid, tid, ts, dur);
      if (a("device")) out_.arg("device", r.device);
      if (a("stream")) out_.arg("stream", tid);
      if (a("correlation")) out_.arg_u("correlation", r.correlation);
      if (a("bytes")) out_.arg_u("bytes", r.value);
      // bytes per ns == GB/s (Kineto's unit); omitted for a zero duration, as Kineto does
      if (dur > 0 && a("memory bandwidth (GB/s)")) {
        out_.arg_d("memory bandwidth (GB/s)", double(r.value) / double(dur));
      }
    }
    if (a("graph id")) out_.arg_u("graph id", r.graph_id);
    if (a("graph node id")) out_.arg_u("graph node id", r.id);
    annotation_args(ann);
    out_.end();
    if (flow_ & kFlowEnd) out_.flow('f', r.correlation, pid, tid, ts);
  }

  void record(const ActivityRecord& r) {
    switch (r.kind) {
      case ActivityKind::kernel:
      case ActivityKind::memcpy:
      case ActivityKind::memset:
        device_work(r);
        return;
      case ActivityKind::sync: {
        out_.begin('X', "cuda_sync", sync_name(r.detail), r.device, sync_tid(r),
                   rel(r.start_ns), r.end_ns - r.start_ns);
        out_.arg_s("cuda_sync_kind", sync_name(r.detail));
        out_.arg("stream", r.stream == kNoStream ? -1 : std::int64_t{r.stream});
        out_.arg_u("correlation", r.correlation);
        out_.arg("device", r.device);
        out_.end();
        return;
      }
      case ActivityKind::runtime_api:
      case ActivityKind::driver_api: {
        const std::int64_t pid = r.u.api.process_id ? r.u.api.process_id : d_.pid;
        const std::int64_t ts = rel(r.start_ns);
        out_.begin('X', r.kind == ActivityKind::runtime_api ? "cuda_runtime" : "cuda_driver",
                   r.name ? r.name : "unknown API", pid, host_tid(r), ts, r.end_ns - r.start_ns);
        out_.arg_u("cbid", r.u.api.cbid);
        out_.arg_u("correlation", r.correlation);
        out_.end();
        if (flow_ & kFlowStart) out_.flow('s', r.correlation, pid, host_tid(r), ts);
        return;
      }
      case ActivityKind::user_range:
      case ActivityKind::marker:
        out_.begin('X', "user_annotation", r.name ? r.name : "", d_.pid, host_tid(r),
                   rel(r.start_ns), r.end_ns - r.start_ns);
        if (r.u.range.domain) out_.arg_s("domain", r.u.range.domain);
        if (r.kind == ActivityKind::marker) out_.arg_s("source", "CUPTI NVTX");
        out_.end();
        return;
      case ActivityKind::user_mark:
        out_.begin('i', "user_annotation", r.name ? r.name : "", d_.pid, host_tid(r),
                   rel(r.start_ns), 0);
        if (r.u.range.domain) out_.arg_s("domain", r.u.range.domain);
        out_.end();
        return;
      case ActivityKind::memory:
        memory(r);
        return;
      case ActivityKind::graph:
        graph(r);
        return;
      case ActivityKind::stream_created:
      case ActivityKind::stream_destroyed:
        out_.begin('i', "cuda_stream",
                   r.kind == ActivityKind::stream_created ? "stream created" : "stream destroyed",
                   r.device, device_tid(r), rel(r.start_ns), 0);
        out_.arg_u("stream", r.stream);
        out_.arg_b("non_blocking", r.detail != 0);
        out_.arg_u("thread", r.id);
        out_.end();
        return;
      default:
        return;
    }
  }

  // Kineto's memory events: "[memory]" instants with signed Bytes for allocations and frees
  // (what torch's memory timeline sums), cudakit's segment events under their own name so
  // they are not summed twice, and a per-device counter track of the totals.
  void memory(const ActivityRecord& r) {
    const auto action = static_cast<MemoryAction>(r.detail);
    if (action == MemoryAction::free_completed) return;  // the free was reported at request
    const bool counted = action == MemoryAction::alloc || action == MemoryAction::free_requested;
    const std::string name =
        counted ? std::string("[memory]") : std::string("[memory] ") + memory_action_name(action);
    const std::int64_t bytes = action == MemoryAction::free_requested ||
                                       action == MemoryAction::segment_free ||
                                       action == MemoryAction::segment_unmap
                                   ? -static_cast<std::int64_t>(r.value)
                                   : static_cast<std::int64_t>(r.value);
    out_.begin('i', "cpu_instant_event", name, d_.pid, host_tid(r), rel(r.start_ns), 0);
    out_.arg("Device Type", 1);  // c10::DeviceType::CUDA
    out_.arg("Device Id", r.device);
    out_.arg_u("Addr", r.id);
    out_.arg("Bytes", bytes);
    out_.arg("Total Allocated", r.u.memory.allocated);
    out_.arg("Total Reserved", r.u.memory.reserved);
    out_.arg_s("Action", memory_action_name(action));
    out_.end();
    if (r.device >= 0) {
      out_.begin('C', "cpu_instant_event", "Memory", r.device, 0, rel(r.start_ns), 0);
      out_.arg("Allocated", r.u.memory.allocated);
      out_.arg("Reserved", r.u.memory.reserved);
      out_.end();
    }
  }

  void graph(const ActivityRecord& r) {
    static const char* names[] = {"graph capture", "graph instantiate", "graph replay",
                                  "graph destroy"};
    const auto phase = static_cast<GraphPhase>(r.detail);
    const bool span = phase == GraphPhase::capture || phase == GraphPhase::replay;
    out_.begin(span ? 'X' : 'i', "cuda_graph", names[r.detail < 4 ? r.detail : 0], d_.pid,
               host_tid(r), rel(r.start_ns), r.end_ns - r.start_ns);
    out_.arg_u("graph id", r.value);
    out_.arg_u("capture id", r.id);
    out_.arg("device", r.device);
    out_.end();
  }

  const TraceData& d_;
  Out& out_;
  std::uint8_t flow_ = 0;  // TraceData::flow of the record being written
  const char* last_kernel_ = nullptr;
  const std::string* last_kernel_name_ = nullptr;
  std::unordered_map<ShapeKey, Shape, ShapeHash> shapes_;
  const ShapeKey* last_shape_key_ = nullptr;
  Shape* last_shape_ = nullptr;
  std::unordered_map<const char*, std::string> demangled_;
  std::unordered_map<unsigned, std::string> copy_names_;
};

}  // namespace layout
}  // namespace cudakit::profiler::detail
