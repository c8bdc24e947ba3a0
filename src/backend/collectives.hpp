// The collective-communication part of the driver seam (backend.hpp): communicators and the
// operations they enqueue on streams. The cuda backend implements it with NCCL (loaded at
// run time, src/backend/cuda/nccl_api.hpp); the emulated backend with its own engine over
// shared memory (src/backend/emulated/comm_engine.hpp), so the same code above the seam runs
// single-process and multi-process collectives in CI.
//
// The vocabulary is NCCL's, numbered as nccl.h (ncclDataType_t, ncclRedOp_t,
// ncclResult_t), so the cuda backend passes values through and the emulated backend refuses
// what NCCL refuses. Choosing a data type for a tensor dtype, validating shapes and devices,
// and the watchdog live above the seam (src/nccl/); backends see pointers and counts.
//
// Errors: communication failures throw nccl::NcclError (cudakit/nccl_types.hpp) carrying the
// ncclResult_t code; a peer that died or a wait that timed out is remote_error.
//
// Thread-safety: every method of BackendComm may be called from any thread. Operations on
// one communicator must be issued in the same order on every rank (NCCL's rule); issuing
// them from several threads at once is allowed but their relative order is then undefined.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cudakit/nccl_types.hpp"
#include "cudakit/stream.hpp"

namespace cudakit::detail {

// ncclDataType_t values. Only the types a cudakit dtype maps to.
enum class CommDataType : int {
  int8 = 0, uint8 = 1, int32 = 2, int64 = 4, float16 = 6, float32 = 7, float64 = 8,
  bfloat16 = 9
};
std::size_t comm_type_size(CommDataType t) noexcept;
const char* comm_type_name(CommDataType t) noexcept;

// The operations a communicator enqueues. Counts are in elements, as NCCL's:
//   all_reduce     send[count] -> recv[count]
//   broadcast      root's send[count] -> every recv[count] (send ignored off the root)
//   reduce         send[count] -> root's recv[count] (recv may be null off the root)
//   all_gather     send[count] -> recv[count * nranks], rank r's part at r * count
//   reduce_scatter send[count * nranks] -> recv[count], rank r gets the reduction of part r
//   send / recv    buffer[count] to / from `peer` (send uses `send`, recv uses `recv`)
// In-place forms are allowed exactly where NCCL allows them (send == recv; all_gather with
// send == recv + rank * count; reduce_scatter with recv == send + rank * count).
enum class CommKind : int { all_reduce, broadcast, reduce, all_gather, reduce_scatter, send, recv };
const char* comm_kind_name(CommKind k) noexcept;

struct CommArgs {
  CommKind kind = CommKind::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  CommDataType type = CommDataType::float32;
  nccl::ReduceOp op = nccl::ReduceOp::sum;
  int root = 0;  // broadcast / reduce: the root rank; send / recv: the peer rank
  // Owner of the buffers, released once the operation has run. Backends that run the
  // operation as a host task keep it until then (the buffers may otherwise go back to a
  // caching allocator and be handed out again before the task reads them); the cuda backend
  // drops it at once (the allocator orders reuse on the stream).
  std::shared_ptr<const void> keep_alive;
};

// Creation options of a communicator rank.
struct CommInitOptions {
  // false: comm_init_rank returns at once and the rank joins in the background; state()
  // says when it is ready (NCCL's non-blocking communicators, ncclConfig_t.blocking = 0).
  bool blocking = true;
  // How long a backend-side wait may last (joining, and the emulated engine's waits for its
  // peers) before it fails with remote_error. Zero: no limit.
  std::chrono::milliseconds timeout{0};
};

enum class CommState { ready, initializing, failed };

// Why a communicator failed.
struct CommError {
  int code = nccl::result::remote_error;  // ncclResult_t
  bool timed_out = false;                  // a wait reached its deadline
  std::string message;
};

// One rank of a communicator, as a backend holds it. Destroying it releases the backend's
// resources (ncclCommDestroy, or ncclCommAbort once aborted or failed); the destructor never
// throws and makes no device call during process exit.
class BackendComm {
 public:
  virtual ~BackendComm() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  virtual int device() const noexcept = 0;
  // Initialization / asynchronous error state (ncclCommGetAsyncError). On failed, *error
  // (if given) says why. Never throws.
  virtual CommState state(CommError* error = nullptr) noexcept = 0;
  // Stops the communicator: operations in flight end (with an error on the other ranks) and
  // later ones throw. Idempotent, never throws (ncclCommAbort).
  virtual void abort() noexcept = 0;
  // Enqueues one operation on stream `s` of this rank's device (the caller has made that
  // device current). Inside comm_group_start/end the operation is deferred to group_end.
  // Throws NcclError for a failed or aborted communicator, ValueError for arguments NCCL
  // would refuse.
  virtual void enqueue(CommArgs args, NativeStream s) = 0;  // NativeStream = StreamHandle
};

// What the backend's collective engine is: NCCL's version code (NCCL_VERSION(X,Y,Z)) and
// suffix, or the reason it is unusable.
struct CommEngineInfo {
  bool available = false;
  int version_code = 0;
  std::string suffix;
  std::string reason;  // "" when available
};

// (major, minor, patch) of an NCCL version code: 2.8.4 is 2804, 2.28.9 is 22809.
void split_nccl_version(int code, int* major, int* minor, int* patch) noexcept;

}  // namespace cudakit::detail
