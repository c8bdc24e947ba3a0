// Emulated backend: activity records for the profiler's tracer (backend/activity.hpp).
//
// The emulated device's kernels are host tasks, so the records come from its own clock
// around them, in the shapes CUPTI gives on the cuda backend:
//   * each enqueueing call (launch_host_kernel, memcpy_async, memset_d8_async,
//     launch_host_task, graph_launch) and each wait (stream/event/device synchronize, stream
//     wait event) is a driver-API record named and numbered like the driver call it stands
//     for (cuLaunchKernel, cuMemcpyAsync, ...), with a fresh correlation id;
//   * the op it enqueued reports a kernel / memcpy / memset record with that correlation id
//     (start/end around the task);
//   * a graph replay reports every kernel / memcpy / memset node with the cuGraphLaunch's
//     correlation id, the exec graph id and the node's graph node id
//     ((exec id << 32) | node id, as CUPTI reports and get_graph_data() / annotations use);
//   * waits report synchronization records; stream creation / destruction stream records.
// Device records are buffered the way CUPTI buffers them, so the tracer meets the same
// conditions on both backends (issue 28: a tracer that flushed before synchronizing lost the
// timestamps of most kernels on the GPU, and nothing here could show it): a record is
// reserved when its work is enqueued, gets its timestamps when the stream's worker has run
// it, and reaches the sink only when activity_flush() hands the buffer out (or when more
// than kBufferRecords wait: the completed ones at the front go, as CUPTI returns full
// buffers). activity_flush() is forced, as the tracer asks CUPTI: a record whose work has
// not run yet goes out with start = end = 0, exactly what CUPTI does with such a record.
// Host-side records (API calls, waits, stream lifecycle) are delivered at once.
//
// Kernels report grid = block = (1, 1, 1), no registers and no shared memory: a host task
// has none, and inventing numbers would make the occupancy columns lie.
//
// Capture rules: activity_start counts as an allocation and activity_stop (with the device
// kinds on) as a free (check_unsafe_call), as CUPTI's record-buffer allocation and release do
// on the cuda backend.
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
  // CUPTI allocates device memory for its record buffers when the device kinds are enabled,
  // on the calling thread: a "potentially unsafe" call under CUDA's capture-mode rules, so a
  // global-mode capture on another thread forbids it (and is invalidated by it) unless the
  // caller is in relaxed mode. Modelled as the allocation it is, so the tracer's handling of
  // that rule (relaxed mode around activity_start) is tested here too.
  if (config.device && sink != nullptr) check_unsafe_call("activity_start (record buffers)");
  ActivityStatus st;
  st.device = config.device && sink != nullptr;
  st.api = config.api && sink != nullptr;
  st.nvtx = false;  // no NVTX tool here: cudakit.nvtx ranges are recorded by the tracer itself
  st.source = "emulated backend clock";
  {
    // Records a previous trace left (work that completed after it stopped) belong to none.
    std::lock_guard lock(pending_mu_);
    for (PendingRecord& p : pending_) p.delivered = true;
    deliver_records_locked(false);
  }
  device_sink_.store(st.device ? sink : nullptr, std::memory_order_release);
  api_sink_.store(st.api ? sink : nullptr, std::memory_order_release);
  return st;
}

void EmulatedBackend::activity_stop() noexcept {
  // Disabling the device kinds and the forced flush that ends CUPTI's session free its record
  // buffers: as "potentially unsafe" under the capture rules as allocating them was, so a
  // global-mode capture on another thread is invalidated unless the caller is in relaxed mode
  // (issue 28). The call itself cannot fail here (stop is noexcept, and CUPTI reports nothing
  // to its caller): the invalidated capture is what shows, at its end.
  if (device_sink_.load(std::memory_order_acquire) != nullptr) {
    try {
      check_unsafe_call("activity_stop (record buffers)");
    } catch (...) {
    }
  }
  device_sink_.store(nullptr, std::memory_order_release);
  api_sink_.store(nullptr, std::memory_order_release);
}

void EmulatedBackend::activity_synchronize() {
  // Devices with a stream (created streams, or the legacy stream once created): like the cuda
  // backend's "contexts that exist", so the trace gains no sync rows for unused devices.
  for (int d = 0; d < device_count(); ++d) {
    Device& dv = dev(d);
    bool used;
    {
      std::lock_guard lock(dv.mu);
      used = !dv.streams.empty() || dv.legacy != nullptr;
    }
    if (used) device_synchronize(d);
  }
}

void EmulatedBackend::activity_flush() {
  std::lock_guard lock(pending_mu_);
  deliver_records_locked(true);
}

namespace {
constexpr std::size_t kBufferRecords = 4096;  // records per "buffer" before a partial hand-out

// What a device record says of its work, apart from the times (set when the work runs).
void describe(ActivityRecord& r, const Stream& s, const OpTrace& t, std::uint64_t graph_node_id,
              std::uint32_t graph_id) {
  r.kind = t.kind;
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
}
}  // namespace

PendingRecord* EmulatedBackend::reserve_record(const Stream& s, const OpTrace& t,
                                               std::uint64_t graph_node_id,
                                               std::uint32_t graph_id) {
  std::lock_guard lock(pending_mu_);
  if (pending_.size() >= kBufferRecords) deliver_records_locked(false);
  PendingRecord& p = pending_.emplace_back();
  describe(p.r, s, t, graph_node_id, graph_id);
  return &p;
}

void EmulatedBackend::cancel_record(PendingRecord* p) noexcept {
  if (p == nullptr || p->done.load(std::memory_order_acquire)) return;
  std::lock_guard lock(pending_mu_);
  p->cancelled = true;
  p->done.store(true, std::memory_order_release);
}

void EmulatedBackend::deliver_records_locked(bool forced) noexcept {
  ActivitySink* sink = device_sink();
  auto hand_out = [&](PendingRecord& p, bool timed) {
    p.delivered = true;
    if (sink == nullptr || p.cancelled) return;
    ActivityRecord r = p.r;
    r.start_ns = timed ? p.start.load(std::memory_order_relaxed) : 0;
    r.end_ns = timed ? p.end.load(std::memory_order_relaxed) : 0;
    sink->record(r);
  };
  if (forced) {
    for (PendingRecord& p : pending_) {
      if (!p.delivered) hand_out(p, p.done.load(std::memory_order_acquire));
    }
  }
  // A record leaves the buffer once it is delivered and its work ran (the worker may still
  // write a record a forced flush handed out early).
  while (!pending_.empty() && pending_.front().done.load(std::memory_order_acquire)) {
    if (!pending_.front().delivered) hand_out(pending_.front(), true);
    pending_.pop_front();
  }
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
  if (t.kind == ActivityKind::none) return;
  if (PendingRecord* p = t.pending) {
    p->start.store(start, std::memory_order_relaxed);
    p->end.store(end, std::memory_order_relaxed);
    p->done.store(true, std::memory_order_release);
    return;
  }
  ActivitySink* sink = device_sink();
  if (sink == nullptr) return;
  ActivityRecord r;
  describe(r, s, t, graph_node_id, graph_id);
  r.start_ns = start;
  r.end_ns = end;
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

std::vector<PendingRecord*> EmulatedBackend::reserve_graph_records(
    const GraphData& g, const std::vector<std::size_t>& order, const Stream& s,
    std::uint32_t exec_id, std::uint32_t correlation) {
  const std::uint64_t graph_bits = static_cast<std::uint64_t>(exec_id) << 32;
  std::vector<PendingRecord*> slots;
  for (std::size_t i : order) {
    const GraphNode& n = g.nodes[i];
    if (!n.fn || n.type == GraphNodeType::host || n.trace.kind == ActivityKind::none) continue;
    OpTrace t = n.trace;
    t.correlation = correlation;
    slots.push_back(reserve_record(s, t, graph_bits | (n.id & 0xFFFFFFFFull), exec_id));
  }
  return slots;
}

void EmulatedBackend::run_graph_traced(const GraphData& g, const std::vector<std::size_t>& order,
                                       const Stream& s, std::uint32_t exec_id,
                                       std::uint32_t correlation,
                                       std::vector<PendingRecord*>& slots) {
  const std::uint64_t graph_bits = static_cast<std::uint64_t>(exec_id) << 32;
  std::size_t slot = 0;
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
      PendingRecord** mine = nullptr;
      if (!slots.empty() && slot < slots.size()) {
        mine = &slots[slot++];
        t.pending = *mine;
      }
      emit_op(s, t, t0, trace_clock_ns(), graph_bits | (n.id & 0xFFFFFFFFull), exec_id);
      if (mine) *mine = nullptr;  // timed: no longer ours to touch (see graph_launch)
    }
  }
}

}  // namespace cudakit::detail::emulated
