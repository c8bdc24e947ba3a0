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
#pragma once

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

}  // namespace profiler
}  // namespace cudakit
