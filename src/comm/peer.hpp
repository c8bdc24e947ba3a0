// The peer transport of cudakit.comm: device kernels over peer access (src/kernels/comm.cu) on
// backends that run kernels, host tasks doing the same over host-addressable memory on the
// others (the emulated backend), launched on the current stream of the device that runs them.
// Cross-device ordering (events between the streams) is the caller's (collectives.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cudakit/tensor.hpp"

namespace cudakit::detail {

// Device `from` can read and write memory of device `to` (peer access enabled, once per
// ordered pair; the answer is cached). False when the pair has no peer access; `why` (if
// given) then says so.
bool peer_access(int from, int to, std::string* why = nullptr);

// Whether the memory of `t` is mapped on every peer that enables access (Backend::
// peer_mappable: cuMemAlloc-style allocations are, whoever made them — cudakit's default
// allocator, torch's; expandable segments and cudaMallocAsync pools are not). One driver
// query per call.
bool peer_mappable(const Tensor& t);

// Every dsts[k] receives `bytes` bytes from `src`, by a kernel / task on src_device's current
// stream. `keep` stays alive until it ran.
void peer_copy(int src_device, const void* src, const std::vector<void*>& dsts, std::size_t bytes,
               std::shared_ptr<const void> keep);

// out[i] = inputs[0][i] + ... (dtype `dtype`, n elements), by a kernel / task on
// dst_device's current stream.
void peer_reduce(int dst_device, void* out, const std::vector<const void*>& inputs,
                 std::int64_t n, DType dtype, std::shared_ptr<const void> keep);

}  // namespace cudakit::detail
