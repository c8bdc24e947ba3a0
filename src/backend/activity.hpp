// Activity records: what a backend reports to the profiler's tracer (seam addition, see
// Backend::activity_start in backend.hpp), and the one record format the tracer stores.
//
// Two producers, one format:
//   * backends deliver device work (kernels, copies, memsets), synchronization, the host
//     API calls that enqueue or wait, NVTX ranges seen by CUPTI and stream lifecycle;
//     cuda: CUPTI activity records converted in src/backend/cuda/cupti_activity.cpp;
//     emulated: its own clock around its host tasks (src/backend/emulated/activity.cpp);
//   * the tracer itself records cudakit's own events (NVTX ranges pushed through cudakit,
//     allocator events, graph lifecycle) in the same format (src/profiler).
// One format because the tracer buffers millions of them: a record is a flat, trivially
// copyable struct of 88 bytes (issue 10 asks <= 100 bytes per buffered kernel
// record). Strings are pointers that outlive the trace: literals, CUPTI's static callback
// names, names interned for the process, or the tracer's per-thread arenas. Rejected: a
// std::string per record (an allocation per kernel on the recording thread and 32 more
// bytes), and keeping CUPTI's records (200+ bytes, layout tied to the CUPTI version).
//
// Numbering: SyncKind, memcpy kinds and memory kinds use CUPTI's enum values
// (CUpti_ActivitySynchronizationType, CUpti_ActivityMemcpyKind, CUpti_ActivityMemoryKind) so
// the cuda backend copies them and the emulated backend speaks the same language; the
// exporter names them as Kineto does.
//
// Clock: trace_clock_ns(), CLOCK_REALTIME in nanoseconds, which is CUPTI's default timestamp
// source on Linux, so host events recorded by cudakit line up with CUPTI's records without a
// conversion (the cuda backend checks that at start and corrects an offset if CUPTI differs).
//
// Thread-safety: ActivitySink::record may be called from any thread, concurrently.
#pragma once

#include <time.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace cudakit::detail {

inline std::int64_t trace_clock_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);  // vDSO: ~20 ns, no system call
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

enum class ActivityKind : std::uint8_t {
  none = 0,
  // ---- delivered by backends ----
  kernel,            // device kernel (emulated: a host task standing for one)
  memcpy,            // device copy
  memset,            // device memset
  sync,              // a host thread waited (stream / event / context sync, stream wait event)
  runtime_api,       // CUDA runtime call (libraries using cudart); cat cuda_runtime
  driver_api,        // CUDA driver call that enqueues or waits; cat cuda_driver
  marker,            // an NVTX range CUPTI saw (start and end paired by the backend)
  stream_created,    // stream lifecycle
  stream_destroyed,
  // ---- recorded by the tracer (above the seam) ----
  user_range,        // a cudakit.nvtx range (push/pop or start/end)
  user_mark,         // a cudakit.nvtx mark
  memory,            // caching allocator event
  graph,             // graph lifecycle (capture, instantiate, replay, destroy)
};

// CUpti_ActivitySynchronizationType values.
enum class SyncKind : std::uint8_t {
  unknown = 0,
  event_synchronize = 1,
  stream_wait_event = 2,
  stream_synchronize = 3,
  context_synchronize = 4,
};

// CUpti_ActivityMemcpyKind values used by the emulated backend.
inline constexpr std::uint8_t kCopyHtoD = 1, kCopyDtoH = 2, kCopyDtoD = 8, kCopyHtoH = 9;
// CUpti_ActivityMemoryKind values used by the emulated backend.
inline constexpr std::uint8_t kMemUnknown = 0, kMemPageable = 1, kMemPinned = 2, kMemDevice = 3;

// Stream id of records that belong to no stream (context synchronize).
inline constexpr std::uint32_t kNoStream = 0xFFFFFFFFu;

// CUPTI driver-API callback ids of the calls the emulated backend reports (its records are
// named and numbered like the driver calls they stand for; the cuda backend checks these
// against cupti_driver_cbid.h).
namespace cbid {
inline constexpr std::uint32_t cuCtxSynchronize = 17;
inline constexpr std::uint32_t cuEventSynchronize = 121;
inline constexpr std::uint32_t cuStreamSynchronize = 126;
inline constexpr std::uint32_t cuMemsetD8Async = 216;
inline constexpr std::uint32_t cuStreamWaitEvent = 295;
inline constexpr std::uint32_t cuMemcpyAsync = 306;
inline constexpr std::uint32_t cuLaunchKernel = 307;
inline constexpr std::uint32_t cuGraphLaunch = 514;
inline constexpr std::uint32_t cuLaunchHostFunc = 527;
}  // namespace cbid

struct ActivityRecord {
  std::int64_t start_ns = 0;  // trace_clock_ns()
  std::int64_t end_ns = 0;    // == start_ns for instantaneous records
  const char* name = nullptr;  // kernel / API / range name; null: derived by the exporter
  // kernel, memcpy, memset: graph node id ((graph id << 32) | node id), 0 outside graphs;
  // memory: address; user_range/marker: NVTX range id; stream_*: recording thread id;
  // graph: the CUDAGraph's capture id.
  std::uint64_t id = 0;
  // memcpy, memset, memory: bytes; graph: exec graph id (0 when unknown).
  std::uint64_t value = 0;
  std::uint32_t correlation = 0;  // links an API record to the device work it launched
  // Device work, sync and stream_* records: the backend's stream id (kNoStream: none).
  // Host records (API, ranges, marks, memory, graph): the system thread id (gettid).
  std::uint32_t stream = 0;
  std::uint32_t graph_id = 0;  // kernel, memcpy, memset: exec graph id (0 outside graphs)
  std::int16_t device = -1;
  ActivityKind kind = ActivityKind::none;
  // sync: SyncKind; memcpy: copy kind; memory: MemoryAction (src/profiler); graph:
  // GraphPhase (src/profiler); stream_created: 1 when the stream is non-blocking.
  std::uint8_t detail = 0;

  struct Kernel {
    std::uint32_t grid[3];
    std::uint32_t block[3];
    std::uint32_t shared_bytes;  // static + dynamic
    std::uint16_t registers;     // per thread
    std::uint16_t reserved;
  };
  struct Copy {  // memcpy, memset
    std::uint8_t src_kind;  // memcpy: source memory kind; memset: the memory kind
    std::uint8_t dst_kind;
  };
  struct Api {
    std::uint32_t cbid;        // CUPTI callback id of the call
    std::uint32_t process_id;
  };
  struct Memory {  // allocator totals after the event, for the device
    std::int64_t allocated;
    std::int64_t reserved;
  };
  struct Range {  // user_range, user_mark, marker
    const char* domain;  // null: NVTX's default domain
  };
  union Payload {
    Kernel kernel;
    Copy copy;
    Api api;
    Memory memory;
    Range range;
  } u{};
};
// 88 bytes: issue 10 asks <= 100 per buffered kernel record (per-thread chunk slack included).
static_assert(sizeof(ActivityRecord) <= 88, "keep the record small: see above");

// Where a backend delivers records during a trace. Implemented by the profiler; the object
// lives for the whole process, so a record that arrives late (work enqueued before stop that
// completed after it) is safe to deliver: the sink drops what does not belong to a trace.
class ActivitySink {
 public:
  virtual void record(const ActivityRecord& r) noexcept = 0;
  // A condition the trace's user should know about (a degraded mode, dropped records).
  virtual void message(std::string_view text) noexcept = 0;

 protected:
  ~ActivitySink() = default;
};

// What the tracer asks a backend for.
struct ActivityConfig {
  bool device = true;  // kernels, copies, memsets, synchronization, stream lifecycle
  bool api = true;     // runtime / driver API records (launch -> kernel flows need them)
  bool nvtx = true;    // NVTX ranges the backend's tool sees (CUPTI markers on cuda)
};

// What the backend delivers for this trace; `reason` explains anything asked but not given.
struct ActivityStatus {
  bool device = false;
  bool api = false;
  bool nvtx = false;
  std::string source;  // "CUPTI 13.0 (libcupti.so.13)", "emulated clock", ...
  std::string reason;  // "" when everything asked for is delivered
};

}  // namespace cudakit::detail
