// Graph kernel annotations (seed: "Graph Kernel Annotations (prototype)"): tag the kernels,
// memcpys and memsets captured inside a scope with user metadata, keyed by the id a
// CUPTI-based profiler reports for each replayed node ("graph node id"), so a profiler trace
// can be joined against them with a dictionary lookup.
//
//   cudakit::CUDAGraph g;
//   cudakit::CaptureOptions opts;
//   opts.enable_annotations = true;
//   cudakit::capture(g, [&] {
//     cudakit::graph_annotations::MarkKernels scope("attention");
//     y = matmul(x, x.t());
//   }, opts);
//   auto ann = cudakit::graph_annotations::get_kernel_annotations();  // id -> [{name: ...}]
//
// Ids: (exec graph id << 32) | node id, the layout of cuGraphNodeGetToolsId (CUDA 13.1+) and
// of CUPTI's graphNodeId. Unlike torch (13.1 only, no-op on 13.0), the cuda backend also
// works on 13.0 drivers through CUPTI's cuptiGetGraphNodeId/cuptiGetGraphExecId (CUPTI loaded
// at run time); the emulated backend produces the same layout from its own ids. The ids are
// remapped to the exec graph when the graph is instantiated (again on re-instantiation), and
// a graph's entries are purged when it is reset or destroyed. They equal the tools_id of
// CUDAGraph::get_graph_data().
//
// Recording is enabled per capture (CUDAGraph::capture_begin(..., enable_annotations) /
// CaptureOptions::enable_annotations). A scope is a no-op outside such a capture, on a
// stream that is not capturing, or when tools ids are unavailable (is_available() false).
// Nested scopes merge key by key, the inner scope winning; each node gets one merged
// annotation (get_kernel_annotations wraps it in a one-element list, as torch). A scope
// covers every node added to the capture while it is open (forked streams included), counted
// in the driver's node order, as torch does.
//
// Values are JSON scalars (null, bool, integer, float, string): annotations are merged into
// JSON profiler traces, and one registry serves C++ and Python. (torch accepts any object.)
//
// Thread-safety: all functions are thread-safe. A MarkKernels scope must be destroyed on
// the thread that created it, with the same stream current.
#pragma once

#include "cudakit/error.hpp"
#include "cudakit/export.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cudakit/stream.hpp"

namespace CUDAKIT_API cudakit {
namespace graph_annotations {

// A JSON scalar. Every integer type converts (size_t, unsigned, int, ...) and is stored as
// int64 (an unsigned value above INT64_MAX is a ValueError), float as double, and a string
// literal as a string. It is a std::variant (std::visit, std::get work on it).
class AnnotationValue
    : public std::variant<std::nullptr_t, bool, std::int64_t, double, std::string> {
 public:
  using Variant = std::variant<std::nullptr_t, bool, std::int64_t, double, std::string>;
  using Variant::Variant;
  AnnotationValue() = default;
  // The integer types std::variant's own conversion refuses (it will not narrow size_t or
  // uint64_t to int64_t, and refuses every alternative for them).
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                 !std::is_constructible_v<Variant, T>, int> = 0>
  AnnotationValue(T v)  // NOLINT: implicit, as the variant's own conversions
      : Variant(checked_int64(v)) {}
  AnnotationValue(float v) : Variant(static_cast<double>(v)) {}  // NOLINT
  AnnotationValue(const char* s) : Variant(std::string(s)) {}    // NOLINT (not bool)

 private:
  template <typename T>
  static std::int64_t checked_int64(T v) {
    if constexpr (std::is_unsigned_v<T>) {
      if (v > static_cast<std::uint64_t>(INT64_MAX)) {
        throw ValueError("graph_annotations: annotation value " + std::to_string(v) +
                         " does not fit a 64-bit signed integer (JSON integers are int64 "
                         "here): pass it as a double or a string");
      }
    }
    return static_cast<std::int64_t>(v);
  }
};
// Keys in insertion order (a str annotation becomes {"name": str}). Duplicate keys: the
// first wins.
using Annotation = std::vector<std::pair<std::string, AnnotationValue>>;

// True when annotations can be recorded: a device is available and the backend reports
// tools ids (cuda: 13.1+ driver or CUPTI; emulated: always).
bool is_available() noexcept;

// RAII scope (torch's mark_kernels). Cheap when nothing records: one relaxed atomic load.
class MarkKernels {
 public:
  explicit MarkKernels(Annotation annotation);
  explicit MarkKernels(std::string name);
  ~MarkKernels();
  MarkKernels(const MarkKernels&) = delete;
  MarkKernels& operator=(const MarkKernels&) = delete;
  bool recording() const noexcept { return recorder_ != nullptr; }

 private:
  std::shared_ptr<void> recorder_;  // the capture's recorder, null when a no-op
  std::shared_ptr<const Annotation> annotation_;
  StreamRef stream_ = StreamRef::default_for(-1);
  std::size_t begin_ = 0;
};

// Snapshot: node id -> [merged annotation].
std::map<std::uint64_t, std::vector<Annotation>> get_kernel_annotations();
// One node's merged annotation, or nullopt.
std::optional<Annotation> kernel_annotation(std::uint64_t node_id);
std::vector<std::uint64_t> annotated_node_ids();  // sorted
std::size_t annotated_node_count();
// Drops every recorded annotation (graphs instantiated later do not re-publish theirs).
void clear_kernel_annotations();

}  // namespace graph_annotations
}  // namespace cudakit
