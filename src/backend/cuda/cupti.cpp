// Run-time loading of CUPTI's graph-id functions (see cupti.hpp).
#include "backend/cuda/cupti.hpp"

#include <cstdlib>
#include <mutex>
#include <type_traits>
#include <vector>

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
// Our declared prototypes must be CUPTI's (the enum result is returned as an int).
static_assert(sizeof(CUptiResult) == sizeof(int));
static_assert(std::is_same_v<decltype(&cuptiGetGraphNodeId), CUptiResult (*)(CUgraphNode, uint64_t*)>);
static_assert(std::is_same_v<decltype(&cuptiGetGraphExecId), CUptiResult (*)(CUgraphExec, uint32_t*)>);
static_assert(std::is_same_v<decltype(&cuptiGetGraphId), CUptiResult (*)(CUgraph, uint32_t*)>);
#endif

namespace cudakit::detail::cuda {
namespace {

// Sonames through the normal dlopen search first, then the toolkit's usual directories (CUPTI
// lives outside the default library path). The strings live as long as the process.
const std::vector<const char*>& candidates() {
  static const auto* owned = [] {
    auto* v = new std::vector<std::string>();
    if (const char* p = std::getenv("CUDAKIT_CUPTI_PATH"); p && *p) v->emplace_back(p);
    // CUPTI 13 for the 13.x driver first; 12 still works with a 13 driver for these calls.
    const char* names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
    for (const char* n : names) v->emplace_back(n);
    std::vector<std::string> roots;
    for (const char* env : {"CUDA_HOME", "CUDA_PATH"}) {
      if (const char* r = std::getenv(env); r && *r) roots.emplace_back(r);
    }
    roots.emplace_back("/usr/local/cuda");
    for (const std::string& root : roots) {
      for (const char* dir : {"/extras/CUPTI/lib64/", "/lib64/", "/lib/"}) {
        for (const char* n : names) v->push_back(root + dir + n);
      }
    }
    return v;
  }();
  static const auto* ptrs = [] {
    auto* p = new std::vector<const char*>();
    for (const std::string& s : *owned) p->push_back(s.c_str());
    return p;
  }();
  return *ptrs;
}

std::string cupti_version(const LoadedLibrary& lib) {
  using GetVersion = int (*)(std::uint32_t*);
  auto fn = reinterpret_cast<GetVersion>(lib.symbol("cuptiGetVersion"));
  std::uint32_t v = 0;
  if (!fn || fn(&v) != 0) return "";
  return "API version " + std::to_string(v);
}

void load(CuptiApi& api) {
  static const LibrarySpec spec{
      "CUPTI", candidates(),
      "set CUDAKIT_CUPTI_PATH to libcupti.so, or use a CUDA 13.1+ driver (graph node ids) ; "
      "without CUPTI traces have no device activity",
      &cupti_version};
  api.lib = load_library(spec, {bind_symbol("cuptiGetGraphNodeId", api.get_graph_node_id),
                                bind_symbol("cuptiGetGraphExecId", api.get_graph_exec_id),
                                bind_symbol("cuptiGetGraphId", api.get_graph_id)});
  api.loaded = !api.lib.soname().empty();
  api.path = api.lib.path().empty() ? api.lib.soname() : api.lib.path();
  api.available = api.lib.available();
  api.reason = api.lib.reason();
}

}  // namespace

const CuptiApi& cupti() noexcept {
  static CuptiApi* api = new CuptiApi();  // leaked: used until process exit
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      load(*api);
    } catch (...) {  // std::string allocation failure only
      api->available = false;
    }
  });
  return *api;
}

}  // namespace cudakit::detail::cuda
