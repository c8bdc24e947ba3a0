// Communication collectives of one process over several devices (seed: torch.cuda.comm —
// broadcast, broadcast_coalesced, reduce_add, reduce_add_coalesced, scatter, gather), with
// torch's signatures and semantics.
//
// Ordering: every result is ordered on the current stream of the device it lives on (scatter:
// on the given stream of its device), after the inputs' work on the current streams of their
// devices; cross-device dependencies are events, never a device-wide synchronization. The
// calls return without waiting for the devices (gather to the CPU waits, as torch's).
//
// How data moves (broadcast, reduce_add and their coalesced forms; see transport()):
//   * peer: device kernels over peer access (enabled once per device pair) — a kernel on the
//     source device writes every destination (broadcast), a kernel on the destination reads
//     every input and sums (reduce_add); host tasks on the emulated backend;
//   * nccl: the collectives engine (cudakit/nccl.hpp) through one cached communicator per
//     ordered device list, created on first use;
//   * copy: plain device-to-device copies and additions (torch's fallback without NCCL).
// automatic (the default) takes peer when every device pair has peer access and the tensors'
// memory is mapped on the peers (cudaMalloc-style memory: cudakit's default allocator, or
// torch's; not expandable segments or cudaMallocAsync pools), else nccl when the
// engine is available, else copy. All transports give the same results.
//
// Bad input (mismatched shapes or dtypes, duplicate or out-of-range devices, chunk sizes that
// do not sum, `out` tensors on the wrong device) raises ValueError naming the argument before
// anything is enqueued.
//
// Thread-safety: all functions are thread-safe; set_transport is a process-wide setting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "cudakit/export.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

namespace CUDAKIT_API cudakit {
namespace comm {

inline constexpr std::size_t kDefaultBufferSize = 10485760;  // torch's buffer_size default

// broadcast(tensor, devices): a copy of `tensor` on each device in `devices` (the tensor
// itself where it already lives). `tensor` may be on the CPU.
std::vector<Tensor> broadcast(const Tensor& tensor, const std::vector<int>& devices);
// broadcast(tensor, out=...): copies `tensor` into each out tensor (device tensors of its
// shape and dtype); returns `out`.
std::vector<Tensor> broadcast(const Tensor& tensor, const std::vector<Tensor>& out);
// Broadcasts a sequence of tensors, all on devices[0], packed into flat buffers of at most
// buffer_size bytes per dtype (a larger tensor goes alone). Result[i][j] is tensor j on
// devices[i]; result[0] are the inputs themselves.
std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors,
                                                     const std::vector<int>& devices,
                                                     std::size_t buffer_size = kDefaultBufferSize);
// Sum of `inputs` (same shape and dtype, on distinct devices) on `destination` (default: the
// current device), which must hold one of the inputs. One input: returned as is.
Tensor reduce_add(const std::vector<Tensor>& inputs, std::optional<int> destination = std::nullopt);
// inputs[i] is the sequence of tensors on device i; returns the elementwise sums, packed in
// flat buffers of buffer_size bytes per dtype as broadcast_coalesced.
std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& inputs,
                                         std::optional<int> destination = std::nullopt,
                                         std::size_t buffer_size = kDefaultBufferSize);
// Splits `tensor` along `dim` (into chunk_sizes, or torch.chunk's equal parts) and puts
// part i on devices[i], copied on streams[i] when given (else that device's current stream).
// A part already on its device is returned as a view. Fewer parts than devices when the
// dimension is short (as torch.chunk).
using StreamList = std::vector<std::optional<StreamRef>>;
std::vector<Tensor> scatter(const Tensor& tensor, const std::vector<int>& devices,
                            const std::optional<std::vector<std::int64_t>>& chunk_sizes = std::nullopt,
                            std::int64_t dim = 0, const StreamList& streams = {});
// scatter(tensor, out=...): part i (out[i].size(dim) long) is copied into out[i].
std::vector<Tensor> scatter(const Tensor& tensor, const std::vector<Tensor>& out,
                            std::int64_t dim = 0, const StreamList& streams = {});
// Concatenates device tensors along `dim` on `destination`: a cuda device, the CPU
// (Device::cpu()), or nullopt for the current device.
Tensor gather(const std::vector<Tensor>& tensors, std::int64_t dim = 0,
              std::optional<Device> destination = std::nullopt);
// gather(tensors, out=...): into `out`, whose shape must be the concatenated shape.
Tensor gather(const std::vector<Tensor>& tensors, const Tensor& out, std::int64_t dim = 0);

enum class Transport { automatic, peer, nccl, copy };
const char* transport_name(Transport t) noexcept;  // "auto", "peer", "nccl", "copy"
// The data path of broadcast / reduce_add between devices (see the header comment; a CPU
// source is always copied up). A forced transport that
// cannot serve a call (nccl without the engine, peer without peer access between two of the
// devices or on memory not mapped on the peers) makes it raise NotSupportedError saying why.
void set_transport(Transport t) noexcept;
Transport transport() noexcept;

}  // namespace comm
}  // namespace cudakit
