// How many CUDAGraph captures are live in the process, on any thread. The tracer's stop()
// reads it: synchronizing a context while another thread captures on it invalidates that
// capture (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, seen on the H200 with 16 capturing threads
// and thread_local capture mode), so stop() then skips its device synchronization and leaves
// the records of work still running out, with a warning, instead of breaking a user's graph.
// cudakit.graph's __enter__ synchronizes the device before capturing, as torch.cuda.graph
// does; it goes through synchronize_unless_capturing() too, so that two threads entering
// `with cudakit.graph(...)` do not invalidate each other's captures (the same H200 run: three
// graph threads' cuCtxSynchronize returned CAPTURE_UNSUPPORTED, the driver's log said
// "Capture was invalidated by a prior API call" for the others).
//
// The check and the synchronize must be one step: a capture that begins between them would
// be invalidated all the same. CaptureStartGate, held from before cuStreamBeginCapture until
// the capture is counted, and synchronize_unless_capturing() exclude each other.
#pragma once

#include <functional>
#include <mutex>

namespace cudakit::graphs::detail {

int live_captures() noexcept;
void note_capture_begun() noexcept;
void note_capture_ended() noexcept;

std::mutex& capture_start_mutex() noexcept;

// Held by capture_begin across the driver's begin-capture call and note_capture_begun().
class CaptureStartGate {
 public:
  CaptureStartGate() : lock_(capture_start_mutex()) {}
 private:
  std::lock_guard<std::mutex> lock_;
};

// Runs `synchronize` and returns true when no capture is live anywhere in the process;
// otherwise returns false without running it. No capture can begin while it runs.
bool synchronize_unless_capturing(const std::function<void()>& synchronize);

}  // namespace cudakit::graphs::detail
