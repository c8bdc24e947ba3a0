// Which streams that allocated here are idle, without ever asking the driver about a destroyed
// one (instrument/stream_lifetime.hpp says why that matters).
//
// The allocator notes every stream it hands memory out on (note_stream, on malloc's slow path
// after a one-entry cache). compact_expandable unmaps free pages only while all of them are
// idle: a block freed on its stream may still be read by work queued before the free on
// another stream that used it without record_stream (torch's test_cudnn_multiple_threads_same_
// device does; torch's default mode never unmaps, so there it only races; unmapping faulted
// with an illegal address on the H200). Checking only the freed block's stream missed that.
//
// A stream cudakit destroys is retired first (retire_stream, from the streams module's hook):
// an event is recorded on it while the handle is valid and the stream leaves the noted list;
// from then on the event is asked, and dropped once complete (its work is done). A handle the
// driver hands out again for a new stream is noted again; that stream first waits on the
// device for the old one's pending fence (note_new_stream), since the free blocks tagged
// with the handle now look like its own.
#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/graph_ops.hpp"
#include "backend/relaxed_capture.hpp"
#include "backend/stream_ops.hpp"
#include "core/capture_gate.hpp"
#include "cudakit/error.hpp"
#include "instrument/stream_lifetime.hpp"
#include "memory/device_allocator.hpp"
#include "memory/locks.hpp"

namespace cudakit::memory {

void DeviceAllocator::note_new_stream(detail::StreamHandle stream) {
  for (detail::StreamHandle s : noted_streams_) {
    if (s == stream) {
      last_noted_stream_ = stream;
      return;
    }
  }
  // The driver handed a destroyed stream's handle out again (the H200 does at once): the free
  // blocks tagged with it look like this stream's own and would be reused in its order
  // without waiting for the old stream's work. The new stream waits for the old one's fence
  // on the device (no host wait), and from then on the handle is an ordinary stream.
  for (std::size_t i = 0; i < retired_.size(); ++i) {
    if (retired_[i].stream != stream) continue;
    // (No fence: recording failed, in practice only on a stream destroyed mid-capture,
    // whose capture the destroy invalidates; nothing to order against.)
    if (retired_[i].fence && !fence_done(i)) {
      // A new stream whose first allocation comes while it captures (a graph's first kernel
      // on a fresh side stream: test_graphs_on_a_green_stream on the H200, where the handle of
      // the previous test's stream came back at once): the wait would put an event recorded
      // outside the capture into it. The capture allocates from its graph's pool, not from
      // the blocks tagged with the old handle, so the stream is left un-noted and the wait
      // happens at its first allocation after the capture.
      try {
        if (graphs_.stream_capture_status(stream, nullptr) != detail::CaptureStatus::none)
          return;
      } catch (...) {
        return;
      }
      try {
        streams_.stream_wait_event(stream, retired_[i].fence);
      } catch (...) {
        break;  // keep the fence: all_noted_streams_idle still asks it
      }
    }
    recycle_fence(retired_[i]);
    retired_.erase(retired_.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  }
  noted_streams_.push_back(stream);
  last_noted_stream_ = stream;
}

void DeviceAllocator::retire_stream(detail::StreamHandle stream) noexcept {
  if (!stream) return;
  try {
    detail::EventHandle e = nullptr;
    {
      Locked lock(*this);
      if (std::find(noted_streams_.begin(), noted_streams_.end(), stream) == noted_streams_.end())
        return;  // never allocated here
      if (!spare_events_.empty()) {
        e = spare_events_.back();
        spare_events_.pop_back();
      }
    }
    // Created and recorded without the locks, as free() records its events (cuEventCreate
    // may wait on a driver lock held by a thread whose draining device runs a host function
    // that frees memory here).
    bool recorded = false;
    try {
      if (!e) e = streams_.event_create(device_, detail::kEventDisableTiming);
      streams_.event_record(e, stream);
      recorded = true;
    } catch (...) {
    }
    Locked lock(*this);
    auto it = std::find(noted_streams_.begin(), noted_streams_.end(), stream);
    if (it != noted_streams_.end()) noted_streams_.erase(it);
    if (last_noted_stream_ == stream) last_noted_stream_ = nullptr;
    if (!recorded && e) {
      spare_events_.push_back(e);
      e = nullptr;
    }
    retired_.push_back({stream, e});
  } catch (...) {  // the hook never throws (a destructor calls it)
  }
}

bool DeviceAllocator::fence_done(std::size_t i) noexcept {
  detail::EventHandle e = retired_[i].fence;
  if (!e) return false;
  try {
    // In relaxed capture mode: a query of an event recorded outside any capture has no part
    // in one, but CUDA refuses it as "potentially unsafe" (and invalidates the capture) from
    // a thread that captures, or from any thread while another captures in global mode.
    detail::RelaxedCaptureScope relaxed(graphs_);
    return relaxed.ok() && streams_.event_query(e);
  } catch (...) {
    return false;
  }
}

void DeviceAllocator::recycle_fence(const RetiredStream& r) {
  if (r.fence) spare_events_.push_back(r.fence);
}

void DeviceAllocator::drop_completed_fences(bool all) noexcept {
  std::size_t keep = 0;
  for (std::size_t i = 0; i < retired_.size(); ++i) {
    if (all || fence_done(i)) {
      recycle_fence(retired_[i]);
      continue;
    }
    retired_[keep++] = retired_[i];
  }
  retired_.resize(keep);
}

std::size_t DeviceAllocator::retired_streams_pending() {
  Locked lock(*this);
  drop_completed_fences(/*all=*/false);
  return retired_.size();
}

bool DeviceAllocator::all_noted_streams_idle() noexcept {
  drop_completed_fences(/*all=*/false);
  if (!retired_.empty()) return false;  // a destroyed stream's work is still running
  // No stream is asked while a capture of cudakit's graphs is live on any thread: querying
  // its stream, or the legacy stream while a blocking stream captures, invalidates that
  // capture whatever its mode (the H200 run of test_traces_beside_16_graph_threads lost a
  // thread_local capture to CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when the status checks and
  // the queries were separate steps and a capture began between them). The capture gate
  // (core/capture_gate.hpp) keeps one from beginning until the queries are done. try_lock:
  // capture_begin holds the gate while it takes this allocator's lock (its pool route), so
  // waiting for the gate here, under that lock, could deadlock; a busy gate means a capture
  // is beginning, and then the answer is "not idle" anyway.
  std::unique_lock<std::mutex> gate(detail::capture_start_mutex(), std::try_to_lock);
  if (!gate.owns_lock() || detail::live_captures() != 0) return false;
  // A capture cudakit does not count (another library's) may still be live on some thread:
  // the queries of streams that are not capturing are made in relaxed mode, where CUDA
  // allows them (fence_done explains the rule).
  detail::RelaxedCaptureScope relaxed(graphs_);
  if (!relaxed.ok()) return false;
  // A capture begun outside cudakit's graphs (a raw cuStreamBeginCapture) is not counted: the
  // created streams' capture states are asked before any stream is queried (the legacy stream
  // cannot capture, and asking it about capture while a blocking stream captures is itself
  // an error).
  for (detail::StreamHandle s : noted_streams_) {
    if (!s) continue;
    try {
      if (graphs_.stream_capture_status(s, nullptr) != detail::CaptureStatus::none) return false;
    } catch (...) {
      // a foreign stream its owner destroyed: the query below drops it
    }
  }
  for (std::size_t i = 0; i < noted_streams_.size();) {
    const detail::StreamHandle s = noted_streams_[i];
    try {
      bool idle;
      if (s) {
        idle = streams_.stream_query(s);
      } else {  // the legacy stream of this device (a null handle)
        DeviceGuard guard(device_);
        idle = streams_.stream_query(s);
      }
      if (!idle) return false;
      ++i;
    } catch (const AcceleratorError& e) {
      // A handle the driver says it does not know (a foreign stream destroyed by its owner
      // without retiring it): its work is over, and keeping it would stop page moves for good.
      if (e.code() != errc::invalid_handle) return false;
      noted_streams_.erase(noted_streams_.begin() + static_cast<std::ptrdiff_t>(i));
      if (last_noted_stream_ == s) last_noted_stream_ = nullptr;
    } catch (...) {
      return false;
    }
  }
  return true;
}

namespace {

// Every DeviceAllocator alive, the registry's and those made directly (tests, the replay
// tool): each may have noted the stream. Lock order: this mutex, then an allocator's locks;
// nothing calls the driver while holding only this one except retire_stream's fence.
std::mutex g_live_mutex;
std::vector<DeviceAllocator*>& live_allocators() {
  static auto* v = new std::vector<DeviceAllocator*>;  // leaked: used until process exit
  return *v;
}

void retire_everywhere(NativeStream s, int device) noexcept {
  std::lock_guard lock(g_live_mutex);
  for (DeviceAllocator* a : live_allocators())
    if (a->device() == device) a->retire_stream(s);
}

}  // namespace

void register_live_allocator(DeviceAllocator* a) noexcept {
  try {
    std::lock_guard lock(g_live_mutex);
    live_allocators().push_back(a);
  } catch (...) {  // out of memory: that allocator's destroyed streams are then asked as such
  }
  instrument::set_stream_retiring_hook(&retire_everywhere);
}

void unregister_live_allocator(DeviceAllocator* a) noexcept {
  std::lock_guard lock(g_live_mutex);
  std::erase(live_allocators(), a);
}

}  // namespace cudakit::memory
