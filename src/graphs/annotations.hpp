// Internals of graph kernel annotations (public API: cudakit/graph_annotations.hpp).
//
// Life of an annotation:
//   capture_begin(enable_annotations)  a Recorder is registered under the capture id;
//   MarkKernels scope                   records (annotation, node count at entry, at exit);
//   capture end                         resolve(): scopes -> {node id: merged annotation},
//                                       using the template's nodes in driver order (torch's
//                                       index-range method) and the low half of tools ids;
//   instantiate                         publish() under the exec graph id (a re-instantiate
//                                       moves them to the new exec id);
//   reset / destroy                     purge() the graph's exec ids.
// The published registry is one map under a mutex: it is touched at capture end,
// instantiate, destroy and by readers, never on replay.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/graph_ops.hpp"
#include "cudakit/graph_annotations.hpp"

namespace cudakit::graphs::detail {

using graph_annotations::Annotation;

struct Recorder {
  struct Scope {
    std::shared_ptr<const Annotation> annotation;
    std::size_t begin = 0, end = 0;  // node count at entry / exit
    std::uint64_t seq = 0;           // exit order: inner scopes exit first
  };
  std::mutex mu;
  std::vector<Scope> scopes;
  std::uint64_t next_seq = 0;
  void add(std::shared_ptr<const Annotation> a, std::size_t begin, std::size_t end);
};

// Captures recording annotations, by backend capture id. `live_recorders()` is the fast
// "is anything recording?" check of MarkKernels.
void register_recorder(std::uint64_t capture_id, std::shared_ptr<Recorder> r);
void unregister_recorder(std::uint64_t capture_id) noexcept;
std::shared_ptr<Recorder> find_recorder(std::uint64_t capture_id);
bool any_recorder() noexcept;

// Node id (low 32 bits of the tools id) -> merged annotation, for kernel/memcpy/memset nodes
// inside at least one scope. Nodes without a tools id are skipped.
std::map<std::uint32_t, Annotation> resolve(const Recorder& r,
                                            const std::vector<cudakit::detail::GraphNodeInfo>& nodes);

// Current generation of the registry (bumped by clear_kernel_annotations).
std::uint64_t annotations_generation() noexcept;
// Publishes `resolved` under exec graph `exec_id`, first dropping `previous_exec_id`'s entries
// (0: none). Skipped when `generation` is stale (cleared since the capture).
void publish(std::uint32_t exec_id, std::uint32_t previous_exec_id,
             const std::map<std::uint32_t, Annotation>& resolved, std::uint64_t generation);
void purge(const std::vector<std::uint32_t>& exec_ids) noexcept;

// Merges `inner` over `outer` key by key (inner wins), keeping inner's key order first.
Annotation merge(const Annotation& inner, const Annotation& outer);

}  // namespace cudakit::graphs::detail
