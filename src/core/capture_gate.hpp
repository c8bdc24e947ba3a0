// How many CUDA graph captures are live in the process, on any thread, and the gate that
// keeps device-wide synchronizes away from them. Synchronizing a context while another thread
// captures on it invalidates that capture, whatever its mode (CUDA_ERROR_STREAM_CAPTURE_
// INVALIDATED; on the H200, driver 580, three graph threads' cuCtxSynchronize returned
// CAPTURE_UNSUPPORTED and the driver logged "Capture was invalidated by a prior API call" for
// the others). Every device-wide synchronize that cudakit makes on its own (cudakit.graph's
// and GraphCapture's pre-capture synchronize, the tracer's stop(), the allocator's release of
// expandable pages in empty_cache) goes through synchronize_unless_capturing().
//
// On the ground floor because graphs (which count captures) sit above memory (which must
// not synchronize during one). The check and the synchronize are one step: a capture that
// began between them would be invalidated all the same, so CaptureStartGate (held by
// capture_begin from before the driver's begin-capture until the capture is counted) and
// synchronize_unless_capturing() exclude each other.
#pragma once

#include <functional>
#include <mutex>

namespace cudakit::detail {

int live_captures() noexcept;
void note_capture_begun() noexcept;
void note_capture_ended() noexcept;

std::mutex& capture_start_mutex() noexcept;

class CaptureStartGate {
 public:
  CaptureStartGate() : lock_(capture_start_mutex()) {}

 private:
  std::lock_guard<std::mutex> lock_;
};

// Runs `synchronize` and returns true when no capture is live anywhere in the process;
// otherwise returns false without running it. No capture can begin while it runs.
bool synchronize_unless_capturing(const std::function<void()>& synchronize);

}  // namespace cudakit::detail
