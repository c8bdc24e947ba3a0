// How many CUDAGraph captures are live in the process, on any thread. The tracer's stop()
// reads it: synchronizing a context while another thread captures on it invalidates that
// capture (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, seen on the H200 with 16 capturing threads
// and thread_local capture mode), so stop() then skips its device synchronization and leaves
// the records of work still running out, with a warning, instead of breaking a user's graph.
#pragma once

namespace cudakit::graphs::detail {

int live_captures() noexcept;
void note_capture_begun() noexcept;
void note_capture_ended() noexcept;

}  // namespace cudakit::graphs::detail
