// Driver seam, green contexts topic: SM partitions of a device and the streams that run on
// them.
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include "backend/types.hpp"

namespace cudakit::detail {

// How a device's SMs may be partitioned into green contexts (CUdevSmResource of
// cuDeviceGetDevResource): a partition has at least `min_partition_sms` SMs and a multiple of
// `sm_alignment` (the driver rounds a requested count up to that).
struct SmResourceInfo {
  int sm_count = 0;
  int min_partition_sms = 0;
  int sm_alignment = 0;
};

struct GreenContextOps {
  // ---- green contexts (SM partitions: cuDevSmResourceSplitByCount + cuGreenCtxCreate) ----
  // NotSupportedError naming the missing entry point on a driver without green contexts
  // (CUDA < 12.4 for contexts, < 12.5 for their streams).
  virtual SmResourceInfo device_sm_resource(int device) = 0;
  // A green context owning `sm_count` SMs of `device` (the caller validated the count against
  // device_sm_resource: >= min_partition_sms, a multiple of sm_alignment, <= sm_count).
  // Returns the context and the SM count the driver actually gave in *granted.
  virtual GreenContextHandle green_context_create(int device, int sm_count, int* granted) = 0;
  // Destroys the context. Its streams must have been destroyed first (the driver leaves them
  // dangling otherwise). Skips the call during shutdown.
  virtual void green_context_destroy(GreenContextHandle g) = 0;
  // A non-blocking stream whose kernels run on the context's SMs. An ordinary stream for every
  // other call (events, waits, copies, capture, stream_destroy).
  virtual StreamHandle green_context_stream_create(GreenContextHandle g, int priority) = 0;

 protected:
  ~GreenContextOps() = default;
};

// The process's backend (backend() in backend.hpp) as its GreenContextOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
GreenContextOps& green_context_ops();

}  // namespace cudakit::detail
