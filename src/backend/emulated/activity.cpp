// Emulated backend: activity records for the profiler's tracer (backend/activity.hpp).
//
// The emulated device's kernels are host tasks, so the records come from its own clock
// around them, in the shapes CUPTI gives on the cuda backend:
//   * each enqueueing call (launch_host_kernel, memcpy_async, memset_d8_async,
//     launch_host_task, graph_launch) and each wait (stream/event/device synchronize, stream
//     wait event) is a driver-API record named and numbered like the driver call it stands
//     for (cuLaunchKernel, cuMemcpyAsync, ...), with a fresh correlation id;
//   * the op it enqueued reports a kernel / memcpy / memset record with that correlation id
//     when the stream's worker runs it (start/end around the task);
//   * a graph replay reports every kernel / memcpy / memset node with the cuGraphLaunch's
//     correlation id, the exec graph id and the node's graph node id
//     ((exec id << 32) | node id, as CUPTI reports and get_graph_data() / annotations use);
//   * waits report synchronization records; stream creation / destruction stream records.
// Kernels report grid = block = (1, 1, 1), no registers and no shared memory: a host task
// has none, and inventing numbers would make the occupancy columns lie.
//
// Cost when no trace runs: one relaxed pointer load per enqueue (device_sink_/api_sink_).
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/emulated/state.hpp"

namespace cudakit::detail::emulated {
namespace {

std::uint32_t thread_id() noexcept {
  thread_local const auto tid = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return tid;
}

std::uint32_t process_id() noexcept {
  static const auto pid = static_cast<std::uint32_t>(::getpid());
  return pid;
}

}  // namespace

ActivityStatus EmulatedBackend::activity_start(ActivitySink* sink, const ActivityConfig& config) {
  ActivityStatus st;
  st.device = config.device && sink != nullptr;
  st.api = config.api && sink != nullptr;
  st.nvtx = false;  // no NVTX tool here: cudakit.nvtx ranges are recorded by the tracer itself
  st.source = "emulated backend clock";
  device_sink_.store(st.device ? sink : nullptr, std::memory_order_release);
  api_sink_.store(st.api ? sink : nullptr, std::memory_order_release);
  return st;
}

void EmulatedBackend::activity_stop() noexcept {
  device_sink_.store(nullptr, std::memory_order_release);
  api_sink_.store(nullptr, std::memory_order_release);
}

EmulatedBackend::ApiCall::ApiCall(EmulatedBackend& b, const char* name,
                                  std::uint32_t cbid) noexcept
    : b_(b), name_(name), cbid_(cbid) {
  if (b.api_sink() == nullptr && b.device_sink() == nullptr) return;
  correlation_ = b.next_correlation();
  start_ = trace_clock_ns();
}

EmulatedBackend::ApiCall::~ApiCall() {
  if (correlation_ == 0) return;
  ActivitySink* sink = b_.api_sink();
  if (sink == nullptr) return;
  ActivityRecord r;
  r.kind = ActivityKind::driver_api;
  r.start_ns = start_;
  r.end_ns = trace_clock_ns();
  r.name = name_;
  r.correlation = correlation_;
  r.stream = thread_id();
  r.u.api.cbid = cbid_;
  r.u.api.process_id = process_id();
  sink->record(r);
}

EmulatedBackend::SyncWait::SyncWait(EmulatedBackend& b, SyncKind kind, const Stream* s,
                                    int device, std::uint32_t correlation) noexcept
    : sink_(b.device_sink()),
      kind_(kind),
      stream_(s ? s->trace_id : kNoStream),
      device_(device),
      correlation_(correlation) {
  if (sink_) start_ = trace_clock_ns();
}

EmulatedBackend::SyncWait::~SyncWait() {
  if (!sink_) return;
  ActivityRecord r;
  r.kind = ActivityKind::sync;
  r.detail = static_cast<std::uint8_t>(kind_);
  r.start_ns = start_;
  r.end_ns = trace_clock_ns();
  r.correlation = correlation_;
  r.stream = stream_;
  r.device = static_cast<std::int16_t>(device_);
  sink_->record(r);
}

OpTrace EmulatedBackend::copy_trace(const void* dst, const void* src, std::size_t bytes) {
  auto kind_of = [this](const void* p) -> std::uint8_t {
    if (pointer_device(p) >= 0) return kMemDevice;
    std::lock_guard lock(pinned_mu_);
    return pinned_.count(const_cast<void*>(p)) ? kMemPinned : kMemPageable;
  };
  OpTrace t;
  t.kind = ActivityKind::memcpy;
  t.bytes = bytes;
  t.src_kind = kind_of(src);
  t.dst_kind = kind_of(dst);
  const bool sd = t.src_kind == kMemDevice, dd = t.dst_kind == kMemDevice;
  t.copy_kind = sd ? (dd ? kCopyDtoD : kCopyDtoH) : (dd ? kCopyHtoD : kCopyHtoH);
  return t;
}

OpTrace EmulatedBackend::memset_trace(const void* dst, std::size_t bytes) {
  OpTrace t;
  t.kind = ActivityKind::memset;
  t.bytes = bytes;
  t.dst_kind = pointer_device(dst) >= 0 ? kMemDevice : kMemPageable;
  t.src_kind = t.dst_kind;
  return t;
}

void EmulatedBackend::emit_op(const Stream& s, const OpTrace& t, std::int64_t start,
                              std::int64_t end, std::uint64_t graph_node_id,
                              std::uint32_t graph_id) noexcept {
  ActivitySink* sink = device_sink();
  if (sink == nullptr || t.kind == ActivityKind::none) return;
  ActivityRecord r;
  r.kind = t.kind;
  r.start_ns = start;
  r.end_ns = end;
  r.name = t.name;
  r.id = graph_node_id;
  r.value = t.bytes;
  r.correlation = t.correlation;
  r.stream = s.trace_id;
  r.device = static_cast<std::int16_t>(s.device->index);
  r.graph_id = graph_id;
  if (t.kind == ActivityKind::kernel) {
    r.u.kernel = ActivityRecord::Kernel{{1, 1, 1}, {1, 1, 1}, 0, 0, 0};
  } else {
    r.detail = t.copy_kind;
    r.u.copy = ActivityRecord::Copy{t.src_kind, t.dst_kind};
  }
  sink->record(r);
}

void EmulatedBackend::emit_stream(ActivityKind kind, const Stream& s) noexcept {
  ActivitySink* sink = device_sink();
  if (sink == nullptr) return;
  ActivityRecord r;
  r.kind = kind;
  r.start_ns = r.end_ns = trace_clock_ns();
  r.stream = s.trace_id;
  r.device = static_cast<std::int16_t>(s.device->index);
  r.id = thread_id();
  r.detail = (s.flags & kStreamNonBlocking) ? 1 : 0;
  sink->record(r);
}

void EmulatedBackend::run_graph_traced(const GraphData& g, const std::vector<std::size_t>& order,
                                       const Stream& s, std::uint32_t exec_id,
                                       std::uint32_t correlation) {
  const std::uint64_t graph_bits = static_cast<std::uint64_t>(exec_id) << 32;
  for (std::size_t i : order) {
    const GraphNode& n = g.nodes[i];
    if (!n.fn) continue;
    if (n.type == GraphNodeType::host) {
      run_host_node(n.fn);
      continue;
    }
    const std::int64_t t0 = trace_clock_ns();
    n.fn();
    if (n.trace.kind != ActivityKind::none) {
      OpTrace t = n.trace;
      t.correlation = correlation;
      emit_op(s, t, t0, trace_clock_ns(), graph_bits | (n.id & 0xFFFFFFFFull), exec_id);
    }
  }
}

}  // namespace cudakit::detail::emulated
