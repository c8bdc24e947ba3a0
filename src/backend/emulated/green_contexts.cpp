// Green contexts on the emulated backend: a model of SM partitions with the driver's rules for
// the emulated architecture (cuda.h's guideline: compute capability 9.0+ partitions hold at
// least 8 SMs in multiples of 8; 8.x at least 4 in multiples of 2; older at least 2 in
// multiples of 2) over the device's kSmCount SMs. A green context records its SM count; its
// streams are ordinary non-blocking emulated streams, so every op, copy, event, wait, capture
// and allocation works on them exactly as on other streams. Work is not throttled to the
// partition's share of the device: the emulator has no SMs to share.
#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {

SmResourceInfo EmulatedBackend::device_sm_resource(int device) {
  dev(device);
  SmResourceInfo info;
  info.sm_count = kSmCount;
  info.min_partition_sms = config_.major >= 9 ? 8 : config_.major == 8 ? 4 : 2;
  info.sm_alignment = config_.major >= 9 ? 8 : 2;
  return info;
}

EmulatedBackend::GreenContext& EmulatedBackend::green_context(GreenContextHandle g) {
  std::lock_guard lock(green_mu_);
  auto it = green_contexts_.find(g);
  if (it == green_contexts_.end()) {
    fail(errc::invalid_context, "not a live green context (destroyed or made up)");
  }
  return *it->second;
}

GreenContextHandle EmulatedBackend::green_context_create(int device, int sm_count,
                                                         int* granted) {
  SmResourceInfo r = device_sm_resource(device);
  // As cuDevSmResourceSplitByCount: the count is rounded up to the rules; a group that does
  // not fit is not made.
  int rounded = sm_count < r.min_partition_sms ? r.min_partition_sms : sm_count;
  rounded = (rounded + r.sm_alignment - 1) / r.sm_alignment * r.sm_alignment;
  if (sm_count < 0 || rounded > r.sm_count) {
    fail(errc::invalid_resource_configuration,
         "green_context_create: no partition of " + std::to_string(sm_count) +
             " SMs fits device " + std::to_string(device) + " (" +
             std::to_string(r.sm_count) + " SMs)");
  }
  auto ctx = std::make_unique<GreenContext>();
  ctx->device = device;
  ctx->sm_count = rounded;
  void* handle = ctx.get();
  std::lock_guard lock(green_mu_);
  green_contexts_.emplace(handle, std::move(ctx));
  if (granted) *granted = rounded;
  return handle;
}

void EmulatedBackend::green_context_destroy(GreenContextHandle g) {
  if (!g || is_shutting_down()) return;
  std::lock_guard lock(green_mu_);
  if (green_contexts_.erase(g) == 0) {
    fail(errc::invalid_context, "green_context_destroy: not a live green context");
  }
}

StreamHandle EmulatedBackend::green_context_stream_create(GreenContextHandle g, int priority) {
  int device = green_context(g).device;
  return stream_create(device, priority, kStreamNonBlocking);
}

}  // namespace cudakit::detail::emulated
