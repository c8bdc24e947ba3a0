// Communicator::Impl: one rank as the public Communicator sees it — the backend's rank
// (collectives.hpp) plus what NCCL leaves to its users: waiting for a non-blocking join,
// a sticky error, and a watchdog.
//
// The watchdog (one thread per process, started with the first Communicator) looks at every
// live communicator every kWatchdogPeriod: it asks the backend for an asynchronous error
// (ncclCommGetAsyncError; the emulated engine's failure flag) and checks the operations in
// flight, each tracked by an event recorded after it on its stream. An operation that has
// not finished `options.timeout` after it was enqueued, or an asynchronous error, aborts the
// communicator (ncclCommAbort, which also unblocks the kernels waiting for a dead peer) and
// makes the error sticky: every later call, check() and synchronize() raise NcclError. This
// is torch's ProcessGroupNCCL watchdog, minus the process kill: the caller decides.
//
// Why events and not a wait per operation: a host thread per blocking wait costs a thread per
// communicator; an event query per tick costs nothing while the device works. Operations
// enqueued inside a graph capture are not tracked (the capture records them; replays are not
// operations of this handle), and operations inside a group are tracked at group_end, when
// they are launched.
//
// Thread-safety: all members are guarded by mu_ or atomic; tick() may run on the watchdog
// thread while user threads enqueue.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/collectives.hpp"
#include "cudakit/nccl.hpp"

namespace cudakit::nccl {

inline constexpr std::chrono::milliseconds kWatchdogPeriod{50};

class Communicator::Impl : public std::enable_shared_from_this<Communicator::Impl> {
 public:
  Impl(std::shared_ptr<detail::BackendComm> comm, CommOptions options);
  ~Impl();

  detail::BackendComm& comm() const { return *comm_; }
  const std::shared_ptr<detail::BackendComm>& backend_comm() const { return comm_; }
  const CommOptions& options() const { return options_; }
  int device() const { return comm_->device(); }
  std::string label() const;  // "rank 1/2 (cuda:1)"

  // Rank 0 of a file rendezvous removes the id file once every rank has joined.
  void remove_when_ready(std::string path);

  bool is_ready();
  void wait_ready();
  std::optional<NcclError> failure();
  void throw_if_failed();
  void synchronize();
  // Records the first failure (later ones are dropped), then aborts the backend's rank.
  void fail(int code, const std::string& message, bool timed_out) noexcept;
  // One watchdog look; never throws.
  void tick() noexcept;

  // Validated arguments in; enqueues on `stream` (default: the current stream of device()),
  // keeps `tensors` alive and tracks the operation.
  void enqueue(detail::CommArgs args, std::optional<StreamRef> stream,
               const std::vector<Tensor>& tensors, const char* what);
  // Starts tracking an operation already launched on `s` (group_end's deferred tracking).
  void track(StreamRef s, const std::string& what);

 private:
  struct Pending {
    Event done;
    std::chrono::steady_clock::time_point deadline;
    std::string what;
  };
  void ready_reached();

  std::shared_ptr<detail::BackendComm> comm_;
  CommOptions options_;
  std::chrono::steady_clock::time_point created_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  int code_ = 0;
  bool timed_out_ = false;
  std::string message_;
  std::string owned_file_;
  std::deque<Pending> pending_;
  std::uint64_t ops_ = 0;
};

// Operations enqueued inside the calling thread's open group, tracked at its end.
void defer_tracking(const std::shared_ptr<Communicator::Impl>& impl, StreamRef s, std::string what);
bool in_group() noexcept;

}  // namespace cudakit::nccl
