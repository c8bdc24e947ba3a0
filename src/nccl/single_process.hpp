// torch.cuda.nccl's single-process machinery, shared with src/comm: the cache of one
// communicator per ordered device list (torch's _communicators; created on first use with
// comm_init_all and kept for the life of the process, never destroyed during exit) and the
// grouped launch of one operation per rank.
#pragma once

#include <memory>
#include <vector>

#include "backend/collectives.hpp"
#include "cudakit/stream.hpp"

namespace cudakit::detail {

// Rank i of the result is on devices[i]. Thread-safe; a repeated device list is found
// without taking the cache's lock (a per-thread copy of the last hit).
const std::vector<std::shared_ptr<BackendComm>>& cached_comms(const std::vector<int>& devices);

// Enqueues args[i] on comms[i] and streams[i], all inside one group (NCCL's rule for one
// thread driving several ranks).
void launch_grouped(const std::vector<std::shared_ptr<BackendComm>>& comms,
                    std::vector<CommArgs> args, const std::vector<StreamRef>& streams);

}  // namespace cudakit::detail
