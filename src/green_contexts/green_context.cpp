// GreenContext (green_context.hpp): validation of the requested SM count against the device's
// partitioning rules, the stream pool, and torch's set_context/pop_context.
//
// set_context/pop_context switch the calling thread's current *stream* (to the context's own
// stream, ordered after the previous one with an event), not the driver's current context as
// torch does (cuCtxPushCurrent of the converted green context). Every cudakit op runs on the
// current stream, so the effect for cudakit work is the same, and we avoid what pushing
// brings: the thread's legacy-stream work of every other library moving onto the partition,
// and a green context current on two threads at once, which cuda.h forbids.
//
// Rejected: a green context shared by streams through reference counting (streams keeping
// it alive). torch's streams are owned by the context too, and a StreamRef stays a plain
// value; the Python binding keeps the context alive while a Stream object from it lives.
#include "cudakit/green_context.hpp"

#include <array>
#include <mutex>
#include <optional>
#include <string>

#include "backend/graph_ops.hpp"
#include "backend/relaxed_capture.hpp"
#include "backend/green_context_ops.hpp"
#include "backend/lifetime.hpp"
#include "backend/stream_ops.hpp"
#include "cudakit/error.hpp"
#include "instrument/stream_lifetime.hpp"

namespace cudakit {
namespace {

constexpr int kStreamPoolSize = 32;  // torch's _STREAMS_PER_GREEN_CONTEXT_POOL

std::string accepted_counts(const SmResource& r) {
  int largest = r.sm_count / r.sm_alignment * r.sm_alignment;
  return "1.." + std::to_string(largest) +
         " (the device has " + std::to_string(r.sm_count) + " SMs; partitions hold at least " +
         std::to_string(r.min_partition_sms) + " SMs in multiples of " +
         std::to_string(r.sm_alignment) + ", larger requests are rounded up)";
}

}  // namespace

struct GreenContext::Impl {
  int device = 0;
  int requested = 0;
  int granted = 0;
  detail::GreenContextHandle handle = nullptr;

  std::mutex mu;  // pool, own stream, parent
  std::array<detail::StreamHandle, kStreamPoolSize> pool{};
  int next = 0;  // pool slots handed out so far (round-robin once full)
  detail::StreamHandle own = nullptr;  // set_context's stream
  std::optional<StreamRef> parent;     // current stream before set_context
  int parent_device = -1;              // current device before set_context

  detail::StreamHandle make_stream() {
    return detail::green_context_ops().green_context_stream_create(handle, 0);
  }

  ~Impl() {
    if (detail::is_shutting_down()) return;  // no device calls during process exit
    detail::StreamOps& be = detail::stream_ops();
    // The garbage collector may drop the last reference on a thread that is capturing a
    // graph: the synchronizes and destroys below are "potentially unsafe" calls that would
    // invalidate that capture in global and thread_local mode. None of them is part of it, so
    // they run in relaxed mode (as a graph's destroy does, graphs/cuda_graph.cpp).
    detail::RelaxedCaptureScope relaxed(detail::graph_ops());
    auto drop = [&](detail::StreamHandle s) {
      if (!s) return;
      try {
        be.stream_synchronize(s);  // work still running on the partition completes first
      } catch (...) {
      }
      instrument::stream_retiring(s, device);  // the allocator drops it (stream_lifetime.hpp)
      try {
        be.stream_destroy(s);
      } catch (...) {
      }
    };
    for (auto s : pool) drop(s);
    drop(own);
    try {
      detail::green_context_ops().green_context_destroy(handle);
    } catch (...) {  // destructors never throw
    }
  }
};

SmResource GreenContext::sm_resource(int device) {
  int d = resolve_device(device);
  detail::SmResourceInfo r = detail::green_context_ops().device_sm_resource(d);
  return SmResource{r.sm_count, r.min_partition_sms, r.sm_alignment};
}

GreenContext GreenContext::create(int num_sms, int device) {
  int d = resolve_device(device);
  SmResource r = sm_resource(d);
  if (num_sms < 1 || num_sms > r.sm_count) {
    throw ValueError("GreenContext.create: num_sms=" + std::to_string(num_sms) +
                     " is not a valid SM count for device " + std::to_string(d) +
                     ": accepted " + accepted_counts(r));
  }
  int rounded = num_sms < r.min_partition_sms ? r.min_partition_sms : num_sms;
  rounded = (rounded + r.sm_alignment - 1) / r.sm_alignment * r.sm_alignment;
  if (rounded > r.sm_count) {
    throw ValueError("GreenContext.create: num_sms=" + std::to_string(num_sms) +
                     " rounds up to " + std::to_string(rounded) + " SMs, more than device " +
                     std::to_string(d) + " has: accepted " + accepted_counts(r));
  }
  auto impl = std::make_unique<Impl>();
  impl->device = d;
  impl->requested = num_sms;
  impl->handle = detail::green_context_ops().green_context_create(d, rounded, &impl->granted);
  return GreenContext(std::move(impl));
}

GreenContext::GreenContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GreenContext::GreenContext(GreenContext&&) noexcept = default;
GreenContext& GreenContext::operator=(GreenContext&&) noexcept = default;
GreenContext::~GreenContext() = default;

int GreenContext::device() const noexcept { return impl_ ? impl_->device : -1; }
int GreenContext::sm_count() const noexcept { return impl_ ? impl_->granted : 0; }
int GreenContext::requested_sms() const noexcept { return impl_ ? impl_->requested : 0; }
NativeGreenContext GreenContext::handle() const noexcept {
  return impl_ ? impl_->handle : nullptr;
}

namespace {
[[noreturn]] void moved_from(const char* what) {
  throw Error(std::string("GreenContext.") + what + ": this GreenContext was moved from");
}
}  // namespace

StreamRef GreenContext::stream() {
  if (!impl_) moved_from("Stream");
  std::lock_guard lock(impl_->mu);
  int slot = impl_->next % kStreamPoolSize;
  if (!impl_->pool[slot]) impl_->pool[slot] = impl_->make_stream();
  ++impl_->next;
  return StreamRef::from_handle(impl_->pool[slot], impl_->device);
}

void GreenContext::set_context() {
  if (!impl_) moved_from("set_context");
  std::lock_guard lock(impl_->mu);
  if (impl_->parent) throw Error("GreenContext.set_context: called twice before pop_context");
  if (!impl_->own) impl_->own = impl_->make_stream();
  const int previous_device = current_device();
  StreamRef previous = current_stream(impl_->device);
  StreamRef own = StreamRef::from_handle(impl_->own, impl_->device);
  own.wait(previous);  // the context's work starts after what was enqueued before
  set_device(impl_->device);
  set_stream(own);
  impl_->parent = previous;
  impl_->parent_device = previous_device;
}

void GreenContext::pop_context() {
  if (!impl_) moved_from("pop_context");
  std::lock_guard lock(impl_->mu);
  if (!impl_->parent) {
    throw Error("GreenContext.pop_context: called without a matching set_context");
  }
  StreamRef parent = *impl_->parent;
  parent.wait(current_stream(impl_->device));  // later work sees the context's results
  set_stream(parent);
  set_device(impl_->parent_device);
  impl_->parent.reset();
}

}  // namespace cudakit
