// CUDAGraph::update: new node parameters for an instantiated graph without instantiating
// again (cudaGraphExecUpdate). An engine captures its decode step once per shape bucket; when
// only pointers or scalars change (another KV-cache block, another position), capturing the
// step again is cheap but instantiating it is not, and a fresh exec graph would also get a new
// exec id (profiler joins and kernel annotations are keyed by it). Updating keeps both.
#include <algorithm>
#include <string>

#include "backend/graph_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "graphs/cuda_graph_impl.hpp"

namespace cudakit {

void CUDAGraph::update(const CUDAGraph& newly_captured) {
  Impl& s = *impl_;
  const Impl& o = *newly_captured.impl_;
  if (&newly_captured == this) {
    throw ValueError("CUDAGraph::update: a graph cannot be updated from itself: pass a new "
                     "capture (CUDAGraph(keep_graph=true)) of the same work");
  }
  if (s.capturing || o.capturing) {
    throw Error("CUDAGraph::update: a graph is still capturing (call capture_end first)");
  }
  if (s.exec == nullptr) {
    throw Error("CUDAGraph::update: this graph is not instantiated: capture it and call "
                "instantiate() or replay() first");
  }
  if (o.graph == nullptr) {
    throw Error("CUDAGraph::update: the new capture's template is not live: capture it with "
                "CUDAGraph(keep_graph=true) (keep_graph=false destroys the template at "
                "capture_end)");
  }
  if (o.device != s.device) {
    throw ValueError("CUDAGraph::update: the new capture ran on device " +
                     std::to_string(o.device) + ", this graph on device " +
                     std::to_string(s.device) + ": both must be captured on the same device");
  }
  if (s.rng_blocks != 0 || o.rng_blocks != 0) {
    throw ValueError("CUDAGraph::update: graphs that draw random numbers cannot be updated "
                     "(each graph has its own Philox offsets): instantiate the new capture and "
                     "replay it instead");
  }
  // The new parameters point into the new capture's memory: its pools must live as long as
  // this exec graph does. Retained first, released again if the driver refuses.
  std::vector<MempoolId> wanted;
  if (o.pool_held) wanted.push_back(o.pool);
  wanted.insert(wanted.end(), o.retained_pools.begin(), o.retained_pools.end());
  const std::size_t before = s.retained_pools.size();
  auto undo = [&]() noexcept {
    while (s.retained_pools.size() > before) {
      try {
        release_pool(s.device, s.retained_pools.back());
      } catch (...) {
      }
      s.retained_pools.pop_back();
    }
  };
  try {
    for (const MempoolId& id : wanted) {
      if (s.pool_held && id == s.pool) continue;
      if (std::find(s.retained_pools.begin(), s.retained_pools.end(), id) !=
          s.retained_pools.end()) {
        continue;
      }
      retain_pool(id);
    }
    DeviceGuard guard(s.device);
    std::string why;
    if (!detail::graph_ops().graph_exec_update(s.exec, o.graph, &why)) {
      throw ValueError("CUDAGraph::update: " + why +
                       ". Only parameters may change (pointers, sizes, scalars): capture the "
                       "same sequence of work, or instantiate the new capture instead");
    }
  } catch (...) {
    undo();
    throw;
  }
  s.sanitizer_accesses = o.sanitizer_accesses;  // what the updated nodes now touch
}

}  // namespace cudakit
