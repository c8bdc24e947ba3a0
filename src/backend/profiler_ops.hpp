// Driver seam, profiler topic: the profiler capture range (cuProfilerStart/Stop) and activity
// tracing; the records are in backend/activity.hpp.
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include "backend/activity.hpp"
#include "backend/types.hpp"

namespace cudakit::detail {

struct ProfilerOps {
  // ---- profiler control (cuProfilerStart/Stop: the capture-range hooks of Nsight Systems
  // and Nsight Compute) ----
  // Act on the calling thread's current context (device 0's primary context if it has none).
  // Idempotent, as the driver's. The emulated backend records the state (test-visible).
  virtual void profiler_start() = 0;
  virtual void profiler_stop() = 0;

  // ---- activity tracing (cudakit::profiler::Trace; records in backend/activity.hpp) ----
  // Starts delivering activity records to `sink` until activity_stop(). One tracer at a time
  // (the profiler serialises). Never fails for a missing tool: the status says what is
  // delivered and why anything asked for is not (cuda: CUPTI absent or held by another tool).
  // Default (struct Backend's, as it names the backend in the reason): nothing is delivered.
  virtual ActivityStatus activity_start(ActivitySink* sink, const ActivityConfig& config) = 0;
  // Waits for the work enqueued so far on every context this process may have traced work
  // on (cuda: each primary context cudakit retained, plus the contexts CUPTI reported created
  // while tracing; emulated: every device), so the records of that work become final. Never
  // creates a context. Records its waits like any synchronize while a trace records.
  virtual void activity_synchronize() {}
  // Delivers every record buffered so far, and returns only once they are delivered (cuda:
  // a forced CUPTI flush, then a wait for the buffer-completed callbacks CUPTI may still run
  // on its own thread). Records of work that had not completed come with start = end = 0
  // (as CUPTI gives them): call activity_synchronize() first. May block; never called
  // concurrently with start/stop.
  virtual void activity_flush() {}
  // Stops recording and releases the tool; records may still arrive for work in flight.
  virtual void activity_stop() noexcept {}

 protected:
  ~ProfilerOps() = default;
};

// The process's backend (backend() in backend.hpp) as its ProfilerOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
ProfilerOps& profiler_ops();

}  // namespace cudakit::detail
