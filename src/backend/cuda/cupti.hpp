// CUPTI, loaded at run time through the shared loader (library_loader.hpp): the ids profilers
// give CUDA graph nodes (here), and the profiler's tracer (cupti_subscriber.* holds the
// process's one CUPTI subscription and dispatches callbacks; cupti_activity.* converts activity
// records). Those files resolve their functions with CuptiApi::symbol(), so this stays the one
// place that finds and loads CUPTI.
//
// Why: kernel annotations and get_graph_data() key nodes by the id a CUPTI-based profiler
// reports for a replayed kernel ((exec graph id << 32) | node id). CUDA 13.1 drivers expose
// it as cuGraphNodeGetToolsId / cuGraphExecGetId; the 13.0 driver does not, but CUPTI has
// had cuptiGetGraphNodeId / cuptiGetGraphExecId for years and needs no subscription for them.
// torch only uses the 13.1 entry points (and silently records nothing on 13.0).
//
// Loading: only on first use (never at import or backend creation: loading CUPTI is a few
// milliseconds and a large library). Search order: $CUDAKIT_CUPTI_PATH (a file), then
// libcupti.so.13 / libcupti.so.12 / libcupti.so through the normal dlopen search
// (LD_LIBRARY_PATH, pip's nvidia-cuda-cupti when on the path), then under $CUDA_HOME,
// $CUDA_PATH and /usr/local/cuda: extras/CUPTI/lib64 and lib64 / lib. Never dlclose'd.
// Prototypes are declared here (not included) because cupti headers are not always next to
// cuda.h; cupti.cpp checks them against cupti_activity.h when that header is available.
//
// Thread-safety: cupti() is safe from any thread; the table is immutable after loading.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "backend/library_loader.hpp"

namespace cudakit::detail::cuda {

struct CuptiApi {
  using GetGraphNodeId = int (*)(CUgraphNode node, std::uint64_t* node_id);
  using GetGraphExecId = int (*)(CUgraphExec exec, std::uint32_t* id);
  using GetGraphId = int (*)(CUgraph graph, std::uint32_t* id);

  GetGraphNodeId get_graph_node_id = nullptr;
  GetGraphExecId get_graph_exec_id = nullptr;
  GetGraphId get_graph_id = nullptr;
  bool available = false;  // library loaded and the three functions resolved
  bool loaded = false;     // the library itself loaded (even when !available)
  std::string path;        // the library that was loaded
  std::string reason;      // why not available ("" when available)
  LoadedLibrary lib;       // for the report (optional_libraries) and symbol()
  // Another CUPTI function (the tracer's), nullptr if absent or CUPTI is not loaded.
  void* symbol(const char* name) const noexcept { return loaded ? lib.symbol(name) : nullptr; }
};

// Loads CUPTI on first call. Never throws.
const CuptiApi& cupti() noexcept;

}  // namespace cudakit::detail::cuda
