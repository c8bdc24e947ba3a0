// StreamRef / Stream, the per-thread current stream and the per-device stream pools.
#include "cudakit/stream.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "backend/device_ops.hpp"
#include "backend/lifetime.hpp"
#include "backend/memory_ops.hpp"
#include "backend/stream_ops.hpp"
#include "cudakit/error.hpp"
#include "devices/sync_debug.hpp"
#include "instrument/observers.hpp"
#include "instrument/stream_lifetime.hpp"

namespace cudakit {
namespace {

constexpr int kPoolSize = 32;      // streams per priority level, as torch
constexpr int kMaxPriorityLevels = 8;

// Current stream per device for this thread; nullptr = legacy default stream.
thread_local std::array<detail::StreamHandle, kMaxDevices> tls_current{};

struct PriorityPool {
  std::once_flag once;
  std::array<detail::StreamHandle, kPoolSize> streams{};
  std::atomic<unsigned> next{0};
};
struct DevicePools {
  std::array<PriorityPool, kMaxPriorityLevels> levels;  // level k = priority -k
};
DevicePools& pools(int device) {
  static auto* all = new std::array<DevicePools, kMaxDevices>();  // leaked on purpose
  return (*all)[device];
}


// Runs fn with `device` current when the stream handle is the legacy default stream (the
// null handle is resolved by the driver against the current context).
template <class Fn>
auto on_device_of(StreamRef s, Fn&& fn) {
  if (s.is_default() && s.device() >= 0 && s.device() != detail::device_ops().current_device()) {
    DeviceGuard guard(s.device());
    return fn();
  }
  return fn();
}

// ValueError unless `priority` is one of the device's stream priorities.
void check_priority(const char* what, int device, int priority, std::pair<int, int> range) {
  auto [least, greatest] = range;
  if (priority > least || priority < greatest) {
    throw ValueError(std::string(what) + ": stream priority " + std::to_string(priority) +
                     " is outside device " + std::to_string(device) + "'s range " +
                     std::to_string(greatest) + " (highest) .. " + std::to_string(least) +
                     " (lowest; the default is 0): stream_priority_range() gives it");
  }
}

void check_copy_args(const char* what, void* dst, const void* src, std::size_t bytes) {
  if (bytes != 0 && (dst == nullptr || src == nullptr)) {
    throw ValueError(std::string(what) + ": " + (dst == nullptr ? "dst" : "src") +
                     " is a null pointer for a copy of " + std::to_string(bytes) + " bytes");
  }
}

// Raw copies are accesses the stream sanitizer should see like any op's (declared after the
// enqueue, as declare_access asks).
void declare_raw(const char* what, const void* src, void* dst, std::size_t bytes,
                 StreamRef stream) {
  if (const auto* o = instrument::stream_observer()) [[unlikely]]  // sanitizer
    o->raw_access(what, src, dst, bytes, stream);
}

}  // namespace

std::pair<int, int> stream_priority_range(int device) {
  DeviceGuard guard(resolve_device(device));  // the cuda backend asks the current context
  return detail::device_ops().stream_priority_range();
}

void memcpy_async(void* dst, const void* src, std::size_t bytes, StreamRef stream) {
  check_copy_args("memcpy_async", dst, src, bytes);
  if (bytes == 0) return;
  on_device_of(stream, [&] { detail::memory_ops().memcpy_async(dst, src, bytes, stream.handle()); });
  declare_raw("memcpy_async", src, dst, bytes, stream);
}

void memset_async(void* dst, int value, std::size_t bytes, StreamRef stream) {
  if (value < -128 || value > 255) {
    throw ValueError("memset_async: value " + std::to_string(value) +
                     " is not a byte (pass -128..255; each byte is set to value & 0xFF)");
  }
  check_copy_args("memset_async", dst, dst, bytes);
  if (bytes == 0) return;
  on_device_of(stream, [&] {
    detail::memory_ops().memset_d8_async(dst, static_cast<unsigned char>(value), bytes,
                                      stream.handle());
  });
  declare_raw("memset_async", nullptr, dst, bytes, stream);
}

void memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device,
                       std::size_t bytes, StreamRef stream) {
  check_copy_args("memcpy_peer_async", dst, src, bytes);
  dst_device = resolve_device(dst_device);
  src_device = resolve_device(src_device);
  if (bytes == 0) return;
  const int dst_on = device_of_pointer(dst), src_on = device_of_pointer(src);
  auto where = [](int d) { return d < 0 ? std::string("host memory") : "device " + std::to_string(d); };
  if (dst_on != dst_device || src_on != src_device) {
    throw ValueError("memcpy_peer_async: " +
                     (dst_on != dst_device
                          ? "dst is " + where(dst_on) + ", not device " + std::to_string(dst_device)
                          : "src is " + where(src_on) + ", not device " +
                                std::to_string(src_device)) +
                     " (memcpy_async copies between any kinds of memory)");
  }
  memcpy_async(dst, src, bytes, stream);
}

StreamRef StreamRef::from_handle(detail::StreamHandle handle, int device) {
  if (device == kCurrentDevice) {
    device = handle ? detail::stream_ops().stream_device(handle) : current_device();
  }
  return StreamRef(handle, device);
}

bool StreamRef::is_done() const {
  const bool done = on_device_of(*this, [&] { return detail::stream_ops().stream_query(handle_); });
  if (const auto* o = instrument::stream_observer(); done && o) [[unlikely]] o->host_waited_stream(handle_, device_);  // sanitizer
  return done;
}

std::uint64_t StreamRef::id() const {
  return on_device_of(*this, [&] { return detail::stream_ops().stream_id(handle_); });
}

void StreamRef::sync() const {
  detail::on_synchronizing_call("Stream.synchronize");
  on_device_of(*this, [&] { detail::stream_ops().stream_synchronize(handle_); });
  if (const auto* o = instrument::stream_observer()) [[unlikely]] o->host_waited_stream(handle_, device_);  // sanitizer
}

void StreamRef::wait(const Event& event) const {
  if (!event.is_created()) return;  // never recorded: nothing to wait for (as torch)
  on_device_of(*this, [&] { detail::stream_ops().stream_wait_event(handle_, event.handle()); });
  if (const auto* o = instrument::stream_observer()) [[unlikely]] o->stream_waited(handle_, device_, event.handle());  // sanitizer
}

void StreamRef::wait(StreamRef other) const {
  if (other == *this) return;
  Event marker;  // no timing: cheapest event kind
  marker.record(other);
  wait(marker);
}

Event StreamRef::record_event() const {
  Event e;
  e.record(*this);
  return e;
}

int StreamRef::priority() const {
  if (handle_ == nullptr) return 0;
  return detail::stream_ops().stream_priority(handle_);
}

void StreamRef::launch_host_func(std::function<void()> fn) const {
  on_device_of(*this, [&] { detail::stream_ops().launch_host_task(handle_, std::move(fn)); });
}

Stream::Stream(int device, int priority, bool non_blocking)
    : StreamRef(nullptr, resolve_device(device)) {
  check_priority("Stream", device_, priority, stream_priority_range(device_));
  handle_ = detail::stream_ops().stream_create(device_, priority,
                                            non_blocking ? detail::kStreamNonBlocking : 0u);
}

Stream::~Stream() {
  if (const auto* o = instrument::stream_observer(); handle_ && o) [[unlikely]] o->stream_destroyed(handle_, device_);  // sanitizer
  if (handle_ && !detail::is_shutting_down()) {
    instrument::stream_retiring(handle_, device_);  // the allocator fences it (stream_lifetime.hpp)
    try {
      detail::stream_ops().stream_destroy(handle_);
    } catch (...) {
    }
  }
}

Stream::Stream(Stream&& other) noexcept : StreamRef(other.release(), other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Stream tmp(std::move(*this));  // destroys our old handle
    device_ = other.device_;
    handle_ = other.release();
  }
  return *this;
}

detail::StreamHandle Stream::release() noexcept {
  detail::StreamHandle h = handle_;
  handle_ = nullptr;
  return h;
}

StreamRef current_stream(int device) {
  int d = device == kCurrentDevice ? current_device() : resolve_device(device);
  return StreamRef::from_handle(tls_current[d], d);
}

StreamRef default_stream(int device) { return StreamRef::default_for(resolve_device(device)); }

void set_stream(StreamRef stream) {
  if (stream.device() < 0 || stream.device() >= kMaxDevices) {
    throw ValueError("set_stream: stream has no valid device");
  }
  tls_current[stream.device()] = stream.handle();
}

StreamRef stream_from_pool(int device, int priority) {
  int d = resolve_device(device);
  auto& be = detail::stream_ops();
  // torch's pool semantics (c10::cuda::getStreamFromPool): a priority above the lowest (0 on
  // CUDA devices) is refused, a priority below the highest is the highest, silently (a
  // program asking for "as urgent as possible" with -100 runs on every device). torch's
  // docstring also promises to map large positive numbers, but its code refuses them; cudakit
  // follows the code. Stream(device, priority) is the strict form.
  const auto [least, greatest] = stream_priority_range(d);
  if (priority > least) {
    throw ValueError("stream_from_pool / Stream(priority=): stream priority " +
                     std::to_string(priority) +
                     " is lower than the lowest priority of device " + std::to_string(d) + " (" +
                     std::to_string(least) + "; the range is " + std::to_string(greatest) +
                     " (highest) .. " + std::to_string(least) +
                     ", lower numbers run first): pass 0 for the default priority or a "
                     "negative number for a higher one, as torch.cuda.Stream");
  }
  const int p = std::max(priority, greatest);  // lower number = higher priority
  int level = least - p;
  if (level >= kMaxPriorityLevels) level = kMaxPriorityLevels - 1;
  PriorityPool& pool = pools(d).levels[level];
  std::call_once(pool.once, [&] {
    for (auto& s : pool.streams) s = be.stream_create(d, p, detail::kStreamNonBlocking);
  });
  unsigned i = pool.next.fetch_add(1, std::memory_order_relaxed) % kPoolSize;
  return StreamRef::from_handle(pool.streams[i], d);
}

StreamRef get_stream_from_external(std::uintptr_t data_ptr, int device) {
  detail::ensure_initialized();
  return StreamRef::from_handle(reinterpret_cast<detail::StreamHandle>(data_ptr), device);
}

StreamGuard::StreamGuard(StreamRef stream)
    : prev_stream_(current_stream(stream.device())), prev_device_(current_device()) {
  if (stream.device() != prev_device_) detail::device_ops().set_current_device(stream.device());
  tls_current[stream.device()] = stream.handle();
}

StreamGuard::~StreamGuard() {
  tls_current[prev_stream_.device()] = prev_stream_.handle();
  if (prev_stream_.device() != prev_device_ && !detail::is_shutting_down()) {
    try {
      detail::device_ops().set_current_device(prev_device_);
    } catch (...) {
    }
  }
}

}  // namespace cudakit
