// Green contexts: a partition of a device's SMs, with streams whose kernels run only on that
// partition (seed: torch.cuda.green_contexts.GreenContext). Built on the driver's SM resource
// split (cuDevSmResourceSplitByCount, cuGreenCtxCreate, cuGreenCtxStreamCreate); the
// emulated backend models the partitions (counts and rounding rules of a Hopper device).
//
// A green context's streams are ordinary cudakit streams (StreamRef): events, waits, the
// caching allocator, graphs and every op work on them. Only kernels are confined to the
// partition; copies use the copy engines as on any stream.
//
// Partition sizes follow the device's rules (sm_resource()): a partition holds at least
// min_partition_sms SMs and a multiple of sm_alignment (8 and 8 on compute capability 9.0+),
// so create(66) gets 72 SMs on an H200; sm_count() tells what was granted.
//
// Thread-safety: create() and the queries are thread-safe. stream() may be called from any
// thread (the pool is guarded). set_context()/pop_context() act on the calling thread's
// current stream and must be paired on one thread. Destroying a GreenContext must not race
// with other calls on it; it waits for its streams' work first.
#pragma once

#include <memory>

#include "cudakit/device.hpp"
#include "cudakit/export.hpp"
#include "cudakit/stream.hpp"

namespace CUDAKIT_API cudakit {

// Driver handle of a green context: CUgreenCtx on cuda, an opaque handle on emulated.
using NativeGreenContext = void*;

// How a device's SMs can be partitioned.
struct SmResource {
  int sm_count = 0;           // SMs of the device
  int min_partition_sms = 0;  // smallest green context
  int sm_alignment = 0;       // green contexts hold a multiple of this many SMs
};

class GreenContext {
 public:
  // SM partitioning rules of `device` (kCurrentDevice: the current device). NotSupportedError
  // on a driver without green contexts (CUDA < 12.4).
  static SmResource sm_resource(int device = kCurrentDevice);

  // A green context with `num_sms` SMs of `device` (rounded up to the device's rules).
  // ValueError naming the accepted range when num_sms < 1, exceeds the device's SMs, or rounds
  // up past them; NotSupportedError on a driver without green contexts.
  static GreenContext create(int num_sms, int device = kCurrentDevice);

  GreenContext(GreenContext&&) noexcept;
  GreenContext& operator=(GreenContext&&) noexcept;
  GreenContext(const GreenContext&) = delete;
  GreenContext& operator=(const GreenContext&) = delete;
  // Waits for the work on its streams, destroys them, then the context. Streams obtained from
  // it (and a current stream set by set_context) are invalid afterwards.
  ~GreenContext();

  int device() const noexcept;
  int sm_count() const noexcept;       // SMs the partition holds
  int requested_sms() const noexcept;  // what create() was asked for
  NativeGreenContext handle() const noexcept;

  // A stream of this context (torch's GreenContext.Stream()): drawn round-robin from a pool of
  // 32 non-blocking streams created on first use, as torch does. Owned by the context.
  StreamRef stream();

  // Deprecated in torch (2.11): use stream() with a StreamGuard instead.
  // Makes the context's own stream (and its device) current on the calling thread, after the
  // work already on the previous current stream; pop_context() restores both, after the work
  // enqueued meanwhile. Error when set twice without pop, or popped without set. Unlike
  // torch, the driver's context stack is left alone (see src/green_contexts).
  [[deprecated("use stream() with a StreamGuard")]] void set_context();
  [[deprecated("use stream() with a StreamGuard")]] void pop_context();

 private:
  struct Impl;
  explicit GreenContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cudakit
