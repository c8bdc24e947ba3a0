// Driver seam, collectives topic: the communication engine (NCCL on cuda, shared memory on
// emulated) and its communicators; their interface is in backend/collectives.hpp.
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include <memory>
#include <vector>

#include "backend/collectives.hpp"
#include "backend/types.hpp"

namespace cudakit::detail {

struct CommOps {
  // ---- collective communication (collectives.hpp: NCCL on cuda, shared memory on emulated) --
  // The engine's identity; probing loads it (cuda: libnccl). Never throws.
  virtual CommEngineInfo comm_engine() noexcept = 0;
  // A new communicator id (ncclGetUniqueId). NotSupportedError when the engine is unusable.
  virtual nccl::UniqueId comm_unique_id() = 0;
  // Rank `rank` of `nranks` ranks sharing `id`, on `device` (ncclCommInitRankConfig). A
  // blocking call returns once every rank has joined (NcclError on failure or timeout); a
  // non-blocking one at once, its state() initializing until then. The caller has checked
  // 1 <= nranks and 0 <= rank < nranks (src/nccl/communicator.cpp, with the user's names).
  virtual std::shared_ptr<BackendComm> comm_init_rank(int nranks, const nccl::UniqueId& id,
                                                      int rank, int device,
                                                      const CommInitOptions& options) = 0;
  // One rank per entry of `devices` (distinct devices, rank i on devices[i]), all in this
  // process (ncclCommInitAll).
  virtual std::vector<std::shared_ptr<BackendComm>> comm_init_all(
      const std::vector<int>& devices) = 0;
  // ncclGroupStart / ncclGroupEnd for the calling thread; groups nest, operations enqueued
  // inside are launched at the outermost end. group_end without start: ValueError.
  virtual void comm_group_start() = 0;
  virtual void comm_group_end() = 0;

 protected:
  ~CommOps() = default;
};

// The process's backend (backend() in backend.hpp) as its CommOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
CommOps& comm_ops();

}  // namespace cudakit::detail
