// Run-time loading of CUPTI's graph-id functions (see cupti.hpp).
#include "backend/cuda/cupti.hpp"

#include <dlfcn.h>
#include <link.h>

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

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* p = std::getenv("CUDAKIT_CUPTI_PATH"); p && *p) out.emplace_back(p);
  // CUPTI 13 for the 13.x driver first; 12 still works with a 13 driver for these calls.
  const char* names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
  for (const char* n : names) out.emplace_back(n);
  std::vector<std::string> roots;
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* r = std::getenv(env); r && *r) roots.emplace_back(r);
  }
  roots.emplace_back("/usr/local/cuda");
  for (const std::string& root : roots) {
    for (const char* dir : {"/extras/CUPTI/lib64/", "/lib64/", "/lib/"}) {
      for (const char* n : names) out.push_back(root + dir + n);
    }
  }
  return out;
}

void load(CuptiApi& api) {
  std::string tried;
  void* lib = nullptr;
  for (const std::string& c : candidates()) {
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      api.path = c;
      break;
    }
    if (tried.size() < 400) tried += (tried.empty() ? "" : ", ") + c;
  }
  if (!lib) {
    api.reason = "CUPTI not found (tried " + tried +
                 "); set CUDAKIT_CUPTI_PATH to libcupti.so, or use a CUDA 13.1+ driver";
    return;
  }
  api.handle = lib;
  if (link_map* lm = nullptr; dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name &&
                              *lm->l_name) {
    api.path = lm->l_name;
  }
  api.get_graph_node_id =
      reinterpret_cast<CuptiApi::GetGraphNodeId>(dlsym(lib, "cuptiGetGraphNodeId"));
  api.get_graph_exec_id =
      reinterpret_cast<CuptiApi::GetGraphExecId>(dlsym(lib, "cuptiGetGraphExecId"));
  api.get_graph_id = reinterpret_cast<CuptiApi::GetGraphId>(dlsym(lib, "cuptiGetGraphId"));
  if (!api.get_graph_node_id || !api.get_graph_exec_id || !api.get_graph_id) {
    api.reason = api.path + " lacks cuptiGetGraphNodeId/cuptiGetGraphExecId (CUPTI too old)";
    return;
  }
  api.available = true;  // the library stays loaded for the life of the process
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
