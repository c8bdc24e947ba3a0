// A finished trace: the collected records plus what the export needs, computed once at
// stop() so export_chrome_trace() is a straight write (issue 10: <= 0.3 s per million
// events):
//   * records sorted by start time (pointers into the collected chunks);
//   * correlation ids that have both a launching API record and device work (flow arrows);
//   * gpu_user_annotation spans: for each NVTX range, per (device, stream), the span of the
//     device work launched from inside it on its thread (Kineto's projection of CPU ranges
//     onto the GPU rows);
//   * the kernel annotations (graph_annotations) of graph nodes, snapshotted at stop and
//     when a graph is destroyed during the trace (a destroyed graph's entries are purged);
//   * device properties, process and thread names.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cudakit/device.hpp"
#include "cudakit/graph_annotations.hpp"
#include "profiler/collector.hpp"

namespace cudakit::profiler::detail {

// ActivityRecord::detail of memory records (the allocator's history actions).
enum class MemoryAction : std::uint8_t {
  alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map,
  segment_unmap, oom, other
};
MemoryAction memory_action(const char* history_action) noexcept;
const char* memory_action_name(MemoryAction a) noexcept;

// ActivityRecord::detail of graph records.
enum class GraphPhase : std::uint8_t { capture, instantiate, replay, destroy };

struct GpuSpan {
  const ActivityRecord* range;  // the user_range / marker
  int device;
  std::uint32_t stream;
  std::int64_t start_ns, end_ns;
};

struct TraceData {
  Collected store;
  std::vector<const ActivityRecord*> records;  // sorted by start_ns
  std::unordered_set<std::uint32_t> api_correlations;     // correlations of API records
  std::unordered_set<std::uint32_t> device_correlations;  // ... of kernels/copies/memsets
  // Per record (same index): kFlowStart on an API record that launched device work in the
  // trace, kFlowEnd on device work whose launch is in the trace.
  static constexpr std::uint8_t kFlowStart = 1, kFlowEnd = 2;
  std::vector<std::uint8_t> flow;
  std::vector<GpuSpan> gpu_spans;
  std::unordered_map<std::uint64_t, graph_annotations::Annotation> annotations;
  std::map<int, DeviceProperties> devices;  // devices that appear in the trace
  std::map<std::uint32_t, std::string> thread_names;  // host thread id -> name
  std::string process_name;
  std::uint32_t pid = 0;
  std::int64_t base_ns = 0;  // ts 0
  std::int64_t end_ns = 0;   // the trace's stop time
  std::vector<std::string> warnings;
  std::string backend, device_source;
  std::size_t dropped_duplicates = 0;  // CUPTI NVTX ranges equal to cudakit.nvtx ones
  // RANK / WORLD_SIZE of the process's environment at stop (torchrun's and cudakit.launch's
  // variables; -1 when unset): written as Kineto's distributedInfo, which
  // `python -m cudakit trace merge-ranks` reads.
  int rank = -1, world_size = -1;
  std::size_t untimed = 0;  // records left out for lack of timestamps (index_trace)
};

// Sorts and indexes `data.store` (filled by the caller along with annotations, devices,
// warnings, ...).
void index_trace(TraceData& data);

}  // namespace cudakit::profiler::detail
