// Capture helpers: capture modes, is_current_stream_capturing, GraphCapture (torch.cuda.graph).
#include <array>
#include <mutex>

#include "backend/graph_ops.hpp"
#include "backend/lifetime.hpp"
#include "backend/stream_ops.hpp"
#include "core/capture_gate.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/stream.hpp"

namespace cudakit {

CaptureErrorMode parse_capture_error_mode(std::string_view name) {
  if (name == "global") return CaptureErrorMode::global;
  if (name == "thread_local") return CaptureErrorMode::thread_local_;
  if (name == "relaxed") return CaptureErrorMode::relaxed;
  throw ValueError("capture_error_mode must be 'global', 'thread_local' or 'relaxed', got '" +
                   std::string(name) + "'");
}

const char* capture_error_mode_name(CaptureErrorMode mode) noexcept {
  switch (mode) {
    case CaptureErrorMode::global: return "global";
    case CaptureErrorMode::thread_local_: return "thread_local";
    case CaptureErrorMode::relaxed: return "relaxed";
  }
  return "unknown";
}

bool is_current_stream_capturing() {
  // Never initialises anything (torch: no context is created by asking).
  if (!detail::backend_created() || !is_initialized()) return false;
  const StreamRef s = current_stream();
  // The legacy default stream never captures, and asking the driver about it while another
  // stream captures globally can itself be an implicit-synchronisation error.
  if (s.is_default()) return false;
  return detail::graph_ops().stream_capture_status(s.handle(), nullptr) !=
         detail::CaptureStatus::none;
}

bool synchronize_for_capture(int device) {
  const int d = resolve_device(device);
  if (detail::synchronize_unless_capturing([d] { synchronize(d); })) return true;
  current_stream(d).sync();
  return false;
}

namespace {
// One side stream per device for captures without an explicit stream (torch's
// graph.default_capture_stream), created on first use and never destroyed. A dedicated
// stream, not a pool stream: pool streams are shared round robin with unrelated work.
StreamRef side_stream(int device) {
  struct Slot {
    std::once_flag once;
    detail::StreamHandle handle = nullptr;
  };
  static auto* slots = new std::array<Slot, kMaxDevices>();
  Slot& slot = (*slots)[device];
  std::call_once(slot.once, [&] {
    slot.handle = detail::stream_ops().stream_create(device, 0, detail::kStreamNonBlocking);
  });
  return StreamRef::from_handle(slot.handle, device);
}
}  // namespace

GraphCapture::GraphCapture(CUDAGraph& graph, CaptureOptions options)
    : graph_(graph), stream_(StreamRef::default_for(-1)) {
  const int device = options.stream ? options.stream->device() : current_device();
  // As torch.cuda.graph: finish outstanding work and return cached blocks first, so the
  // capture starts from a quiet device and its pool can use the freed memory.
  synchronize_for_capture(device);  // the device, or only this thread's stream (graphs.hpp)
  empty_cache();
  stream_ = options.stream ? *options.stream : side_stream(device);
  guard_.emplace(stream_);
  try {
    graph_.capture_begin(options.pool, options.capture_error_mode, options.enable_annotations);
  } catch (...) {
    guard_.reset();
    throw;
  }
  open_ = true;
}

void GraphCapture::end() {
  if (!open_) throw Error("GraphCapture::end: the capture already ended");
  open_ = false;
  try {
    graph_.capture_end();
  } catch (...) {
    graph_.abort_capture();  // no-op when the capture itself had ended
    guard_.reset();
    throw;
  }
  guard_.reset();
}

GraphCapture::~GraphCapture() {
  if (open_) graph_.abort_capture();
  guard_.reset();
}

}  // namespace cudakit
