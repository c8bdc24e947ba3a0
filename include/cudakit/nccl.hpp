// NCCL (seed: torch.cuda.nccl) — collectives between devices and between processes.
//
// NCCL is the engine on the cuda backend, loaded at run time (libnccl.so.2; set
// CUDAKIT_NCCL_LIBRARY to a path to pick another copy); cudakit never links it. The emulated
// backend provides the same communicators with its own engine over shared memory, between
// the devices of one process and between processes of one machine.
//
// Two layers:
//   * torch.cuda.nccl's single-process functions (all_reduce, reduce, broadcast,
//     all_gather, reduce_scatter) over one tensor per device. Without `comms`, one
//     communicator per ordered device list is created on first use and cached.
//   * Communicator: one rank of a communicator that may span processes, created from a
//     UniqueId the ranks share (through a file, the environment rendezvous of torchrun /
//     `python -m cudakit.launch`, or any transport of the caller's), with collectives,
//     point-to-point send/recv, non-blocking initialization, abort(), and a watchdog that
//     turns a dead or stuck peer into an NcclError within the communicator's timeout.
//
// Every operation is ordered on a stream (the current stream of the tensor's device unless
// one is given) and returns without waiting for the device. Inputs are validated before
// anything is enqueued: a bad call changes nothing.
//
// Thread-safety: all functions are thread-safe. A Communicator is a cheap handle (copies
// share one rank); its methods may be called from several threads, but every rank must
// issue a communicator's operations in the same order (NCCL's rule). Groups are per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cudakit/error.hpp"
#include "cudakit/export.hpp"
#include "cudakit/nccl_types.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

namespace CUDAKIT_API cudakit {
namespace nccl {

// The engine's version (torch.cuda.nccl.version()): the loaded libnccl's on cuda, the NCCL
// API level the emulated engine implements on emulated. NotSupportedError (saying why) when
// NCCL cannot be loaded.
Version version();
// Whether the collectives engine can run (never throws).
bool engine_available() noexcept;

// torch.cuda.nccl.is_available(tensors): the engine is available and every tensor is a
// contiguous device tensor on its own device.
bool is_available(const std::vector<Tensor>& tensors) noexcept;

// A new id (ncclGetUniqueId). On cuda the calling process must take part in the
// communicator (NCCL's bootstrap root runs in it).
UniqueId unique_id();

struct CommOptions {
  // The device this rank uses; kCurrentDevice: the calling thread's current device (from_env:
  // LOCAL_RANK).
  int device = kCurrentDevice;
  // false: the constructor returns at once while the rank joins in the background
  // (ncclConfig_t.blocking = 0); is_ready() tells, wait_ready() waits, and operations wait
  // for it themselves.
  bool blocking = true;
  // How long joining, and each operation, may take before the communicator is aborted and
  // NcclError(timed_out) raised (torch's process-group default: 10 minutes). Zero: forever.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

class Communicator {
 public:
  Communicator() = default;  // no communicator (valid() is false)
  // Rank `rank` of `world_size` ranks sharing `id` (ncclCommInitRankConfig).
  Communicator(int world_size, const UniqueId& id, int rank, CommOptions options = {});

  // Environment rendezvous, as torchrun and `python -m cudakit.launch` set it: RANK,
  // WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and LOCAL_RANK for the device unless
  // options.device says). Rank 0 makes the id and serves it on MASTER_ADDR:MASTER_PORT over
  // TCP; the others fetch it (retrying until options.timeout). ValueError naming a missing
  // or malformed variable. The port must be free for rank 0 (torchrun's own store occupies
  // it: use from_file there).
  static Communicator from_env(CommOptions options = {});
  // File rendezvous: rank 0 writes the id to `path` (atomically: a temporary file renamed);
  // the others wait for it (until options.timeout). Rank 0 removes the file once every rank
  // has joined.
  static Communicator from_file(const std::string& path, int world_size, int rank,
                                CommOptions options = {});

  bool valid() const noexcept { return static_cast<bool>(impl_); }
  int rank() const;
  int size() const;
  int device() const;
  const CommOptions& options() const;

  bool is_ready() const;   // initialization finished (false while it runs or after it failed)
  void wait_ready() const;  // waits for initialization; NcclError if it fails or times out
  // The asynchronous error of the communicator (a failed peer, a timeout, abort()), or
  // nullopt while it is healthy. Never waits.
  std::optional<std::string> error() const;
  void check() const;  // throws the NcclError behind error(), if any
  // Waits (up to the timeout) until every operation enqueued so far through this handle has
  // finished on the device; NcclError if one failed, a peer died, or the wait timed out.
  void synchronize() const;
  // Aborts the communicator (ncclCommAbort): operations in flight end, other ranks see an
  // error, and every later call throws NcclError. Never throws.
  void abort() noexcept;

  // ---- collectives (stream: the current stream of device() unless given) ----
  // Tensors must be contiguous, on device(), of one dtype; sizes as NCCL's (see each).
  void all_reduce(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum,
                  std::optional<StreamRef> stream = std::nullopt);
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum,
                  std::optional<StreamRef> stream = std::nullopt) {
    all_reduce(tensor, tensor, op, stream);
  }
  // `tensor` is sent from `root` and received everywhere else (in place).
  void broadcast(const Tensor& tensor, int root, std::optional<StreamRef> stream = std::nullopt);
  // The root's `input` lands in every rank's `output` (input is unused off the root).
  void broadcast(const Tensor& input, const Tensor& output, int root,
                 std::optional<StreamRef> stream = std::nullopt);
  // `output` (same size as input) is written on `root` only; off the root it may be undefined.
  void reduce(const Tensor& input, const Tensor& output, int root, ReduceOp op = ReduceOp::sum,
              std::optional<StreamRef> stream = std::nullopt);
  // output.numel() == input.numel() * size(); rank r's input lands at r * input.numel().
  void all_gather(const Tensor& input, const Tensor& output,
                  std::optional<StreamRef> stream = std::nullopt);
  // input.numel() == output.numel() * size(); rank r gets the reduction of part r.
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum,
                      std::optional<StreamRef> stream = std::nullopt);
  // Point to point: the peer must post the matching recv / send (same count and dtype).
  // Pair them inside a group (group_start / group_end) when two ranks exchange both ways.
  void send(const Tensor& tensor, int peer, std::optional<StreamRef> stream = std::nullopt);
  void recv(const Tensor& tensor, int peer, std::optional<StreamRef> stream = std::nullopt);

  // Releases this handle; the rank is destroyed with its last handle (outstanding work is
  // not waited for: call synchronize() first). Never throws.
  void reset() noexcept { impl_.reset(); }

  class Impl;  // src/nccl/communicator.cpp
  explicit Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<Impl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// torch.cuda.nccl.init_rank(num_ranks, uid, rank): a blocking Communicator on the current
// device.
Communicator init_rank(int num_ranks, const UniqueId& id, int rank);

// Groups (ncclGroupStart / ncclGroupEnd): operations issued on this thread between them are
// launched together at the outermost group_end, so ranks may post sends and receives in any
// order. Groups nest. ValueError for a group_end without group_start.
void group_start();
void group_end();
class Group {  // RAII group (ends it on scope exit; an exception ends it too)
 public:
  Group() { group_start(); }
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
};

// ---- torch.cuda.nccl's single-process collectives: inputs[i] on its own device ----
// `streams[i]` (when given and set) orders device i's part, else its current stream;
// `comms[i]` (when given) is the rank used for inputs[i], else the cached communicator of
// the input devices. Errors as torch's check_inputs (ValueError here), before any work.
using StreamList = std::vector<std::optional<StreamRef>>;
void all_reduce(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                ReduceOp op = ReduceOp::sum, const StreamList& streams = {},
                const std::vector<Communicator>& comms = {});
// The reduction lands in `output`, on inputs[root]'s device.
void reduce(const std::vector<Tensor>& inputs, const Tensor& output, int root = 0,
            ReduceOp op = ReduceOp::sum, const StreamList& streams = {},
            const std::vector<Communicator>& comms = {});
void broadcast(const std::vector<Tensor>& tensors, int root = 0, const StreamList& streams = {},
               const std::vector<Communicator>& comms = {});
// outputs[i].numel() == inputs.size() * inputs[i].numel().
void all_gather(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                const StreamList& streams = {}, const std::vector<Communicator>& comms = {});
// inputs[i].numel() == inputs.size() * outputs[i].numel().
void reduce_scatter(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                    ReduceOp op = ReduceOp::sum, const StreamList& streams = {},
                    const std::vector<Communicator>& comms = {});

}  // namespace nccl
}  // namespace cudakit
