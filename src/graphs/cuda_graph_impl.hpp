// CUDAGraph's state (cudakit/graphs.hpp). One capture cycle runs from construction or
// reset() to the next reset() or destruction; destroy callbacks, retained objects and the
// destroy hooks belong to the cycle.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/types.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/random.hpp"
#include "graphs/annotations.hpp"
#include "graphs/hooks.hpp"

namespace cudakit {

struct CUDAGraph::Impl {
  explicit Impl(bool keep) : keep_graph(keep) {}

  bool keep_graph;
  // ---- capture ----
  bool capturing = false;
  bool capture_ended = false;   // a capture ended successfully in this cycle (pool() valid)
  bool captured_empty = false;  // ... and recorded no node
  bool cycle_captured = false;  // capture_begin ran in this cycle (destroy hooks fire)
  int device = -1;
  StreamRef capture_stream = StreamRef::default_for(-1);
  std::uint64_t capture_id = 0;
  // ---- memory pools ----
  MempoolId pool{0, 0};
  bool pool_held = false;       // we hold a use of `pool` (released at reset)
  bool routing = false;         // allocations are routed to `pool` (during capture)
  std::vector<MempoolId> retained_pools;
  // ---- RNG (default generator of the capture device) ----
  Generator* rng = nullptr;      // registered for this capture (capture_prologue ran)
  std::uint64_t rng_blocks = 0;  // Philox blocks one replay consumes
  // ---- graph objects ----
  detail::GraphHandle graph = nullptr;     // template
  detail::GraphExecHandle exec = nullptr;  // instantiation
  std::optional<std::uint32_t> exec_id;    // of `exec`, once queried
  std::vector<std::uint32_t> exec_ids;     // every exec id of this cycle (destroy hooks)
  // ---- annotations ----
  std::shared_ptr<graphs::detail::Recorder> recorder;           // while capturing
  std::map<std::uint32_t, graph_annotations::Annotation> annotations;  // resolved
  std::uint64_t annotations_generation = 0;
  std::uint32_t published_exec_id = 0;  // exec id the annotations are keyed to (0: none)
  // ---- get_graph_data cache (live during one instantiate()'s hooks only) ----
  bool caching_graph_data = false;
  mutable std::shared_ptr<const GraphData> graph_data_cache;
  // ---- per-graph hooks (kept across reset) ----
  std::shared_ptr<graphs::detail::GraphHookList> capture_start_hooks =
      std::make_shared<graphs::detail::GraphHookList>();
  std::shared_ptr<graphs::detail::GraphHookList> capture_end_hooks =
      std::make_shared<graphs::detail::GraphHookList>();
  std::shared_ptr<graphs::detail::GraphHookList> post_instantiate_hooks =
      std::make_shared<graphs::detail::GraphHookList>();
  std::shared_ptr<graphs::detail::GraphHookList> replay_start_hooks =
      std::make_shared<graphs::detail::GraphHookList>();
  std::shared_ptr<graphs::detail::GraphHookList> replay_end_hooks =
      std::make_shared<graphs::detail::GraphHookList>();
  // ---- per-cycle destroy state ----
  std::shared_ptr<graphs::detail::HookList<std::function<void()>>> destroy_callbacks =
      std::make_shared<graphs::detail::HookList<std::function<void()>>>();
  std::shared_ptr<graphs::detail::HookList<std::shared_ptr<const void>>> retained =
      std::make_shared<graphs::detail::HookList<std::shared_ptr<const void>>>();
  bool sync_before_release = false;
  std::mutex replay_streams_mu;           // replays may run on several threads
  std::vector<StreamRef> replay_streams;  // recorded only when sync_before_release
  // ---- stream sanitizer: the accesses captured (null unless it was on at capture_begin) ----
  std::shared_ptr<const void> sanitizer_accesses;

  // Helpers (cuda_graph.cpp).
  void end_routing() noexcept;
  void release_pools() noexcept;
  void finish_rng() noexcept;
  std::optional<std::uint32_t> query_exec_id();
  void fire_destroy() noexcept;
  void free_graph_objects() noexcept;
};

}  // namespace cudakit
