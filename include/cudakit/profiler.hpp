// Profiler control (seed: torch.cuda.profiler.start, stop, profile).
//
// start()/stop() are cuProfilerStart/cuProfilerStop: the capture-range switches of Nsight
// Systems (`nsys profile --capture-range=cudaProfilerApi`) and Nsight Compute
// (`ncu --profile-from-start off`). Without such a tool they do nothing observable. They act on
// the calling thread's current context (device 0's primary context on a thread that has none,
// as torch's cudaProfilerStart does through the runtime). On the emulated backend they record
// the state for tests.
//
// Errors: AcceleratorError when the backend cannot run (no driver/device), NotSupportedError
// when the driver lacks the entry points.
//
// Thread-safety: safe from any thread; profiling is process-wide, so concurrent start/stop
// from several threads simply toggle one switch.
//
// Tracer (issue 10 §2; torch delegates this to Kineto / torch.profiler): a Trace records, while
// it lives or until stop(), the device activity the backend reports (cuda: CUPTI kernels,
// copies, memsets, synchronization, runtime/driver API calls, NVTX ranges; emulated: the same
// kinds from its own clock around its host tasks), plus cudakit's own events: cudakit.nvtx
// ranges and marks, caching-allocator events with bytes and totals, and graph lifecycle
// (capture, instantiate, replay, destroy). export_chrome_trace() writes Chrome/Perfetto JSON in
// Kineto's layout, so tools that read torch.profiler traces read it: one process per device,
// one thread per stream, Kineto's `cat` names (kernel, gpu_memcpy, gpu_memset, cuda_runtime,
// cuda_driver, cuda_sync, user_annotation, gpu_user_annotation), Kineto's kernel args, "ac2g"
// flow arrows from each launch to its kernels, `graph id` / `graph node id` on work replayed
// from a graph, and the kernel annotations of cudakit::graph_annotations merged into those
// events' args (args.update(annotation), the join the seed shows, done for the user).
//
//   cudakit::profiler::Trace trace;          // starts recording
//   run_step();
//   trace.stop();                            // synchronizes the devices, collects
//   trace.export_chrome_trace("trace.json"); // open in https://ui.perfetto.dev
//
// One trace records at a time in a process (Error otherwise). On cuda the device part needs
// CUPTI (loaded at run time) and its one subscription: when CUPTI is missing or another tool
// holds it (Nsight Systems, torch.profiler, ...), the trace still records cudakit's own events
// and warnings() says why the device part is missing; nothing fails.
//
// Cost: recording appends a fixed-size record (<= 96 bytes) to a per-thread buffer: no lock
// and no allocation per event beyond a new chunk every 4096 records. With no trace running the
// hooks cost one relaxed load per NVTX call, allocator call and emulated enqueue.
//
// Thread-safety: a Trace object is not thread-safe (start/stop/read from one thread at a
// time); the recording itself covers every thread of the process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "cudakit/export.hpp"

namespace CUDAKIT_API cudakit {
namespace profiler {

void start();
void stop();

// What start()/stop() have done in this process: whether profiling is on (the last call that
// reached the backend was start()), and how many calls reached it. Counted above the seam, so
// it reads the same on both backends; a call that threw is not counted.
struct State {
  bool active = false;
  unsigned long long starts = 0, stops = 0;
};
State state() noexcept;

// torch.cuda.profiler.profile() for C++: start() on construction, stop() on destruction.
// The constructor throws what start() throws; the destructor never throws (a failing stop()
// is ignored, as nothing can be reported from a destructor).
class ProfileGuard {
 public:
  ProfileGuard() { start(); }
  ~ProfileGuard();
  ProfileGuard(const ProfileGuard&) = delete;
  ProfileGuard& operator=(const ProfileGuard&) = delete;
};

// ---- tracer ----

struct TraceOptions {
  bool device = true;       // kernels, copies, memsets, synchronization, stream lifecycle
  bool api = true;          // runtime/driver API calls (the launch -> kernel flows need them)
  bool nvtx = true;         // cudakit.nvtx ranges and marks (and CUPTI's NVTX ranges on cuda)
  bool memory = true;       // caching allocator events
  bool graphs = true;       // graph lifecycle events and annotations merged into kernel args
  bool synchronize = true;  // stop() first synchronizes the devices used (as torch.profiler),
                            // so work enqueued inside the trace is in it
};

// One event of the trace in Chrome trace terms (what export_chrome_trace writes, with
// timestamps in nanoseconds since the trace's base time instead of microseconds).
using TraceArgValue = std::variant<std::nullptr_t, bool, std::int64_t, std::uint64_t, double,
                                   std::string, std::vector<std::int64_t>>;
struct TraceEvent {
  char phase = 'X';        // 'X' complete, 'i' instant, 'C' counter, 's'/'f' flow, 'M' metadata
  std::string category;    // Kineto's `cat` ("kernel", "cuda_driver", ...); "" for metadata
  std::string name;
  std::int64_t pid = 0;    // device index for device rows, the process id for host rows
  std::int64_t tid = 0;    // stream id for device rows, the thread id for host rows
  std::int64_t ts_ns = 0;  // since base_time_ns()
  std::int64_t dur_ns = 0;
  std::uint64_t flow_id = 0;  // 's' / 'f' events: the correlation id
  std::vector<std::pair<std::string, TraceArgValue>> args;
};

class Trace {
 public:
  // Starts recording. Throws Error when another Trace is recording.
  explicit Trace(TraceOptions options = {});
  // Stops if still recording (never throws).
  ~Trace();
  Trace(Trace&&) noexcept;
  Trace& operator=(Trace&&) noexcept;
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // Stops recording and collects the events; idempotent.
  void stop();
  bool recording() const noexcept;

  // ---- results (Error while recording) ----
  // Every trace event, metadata events first, in the order export_chrome_trace writes them.
  std::vector<TraceEvent> events() const;
  // Writes Chrome/Perfetto JSON, gzip-compressed when `path` ends in ".gz" (streamed; Perfetto
  // and chrome://tracing open .json.gz directly). Throws ValueError for an empty path and
  // Error naming the path and the system's reason when it cannot be written.
  void export_chrome_trace(const std::string& path) const;
  // Writes Perfetto's native protobuf trace (a TracePacket stream: process / thread / stream
  // tracks, slices with their args as debug annotations, counters, flows; names interned),
  // ~4x smaller than the JSON, for https://ui.perfetto.dev and trace_processor. ".gz" works
  // here too. Errors as export_chrome_trace.
  void export_perfetto(const std::string& path) const;
  std::string chrome_trace_json() const;
  std::int64_t base_time_ns() const;  // CLOCK_REALTIME ns of ts == 0 (baseTimeNanoseconds)
  std::size_t record_count() const;   // records buffered (before flows / metadata are added)
  // Why parts of the trace are missing (CUPTI absent or held by another tool, ...).
  std::vector<std::string> warnings() const;
  // What the backend delivered: e.g. "CUPTI 13.0 (libcupti.so.13)", "emulated backend clock".
  std::string device_source() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace profiler
}  // namespace cudakit
