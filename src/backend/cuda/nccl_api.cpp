#include "backend/cuda/nccl_api.hpp"

#include <cstdlib>

#include "backend/collectives.hpp"

namespace cudakit::detail::cuda {

const Nccl& nccl() noexcept {
  static const Nccl* lib = [] {
    auto* n = new Nccl();  // leaked: communicators may outlive static destruction
    std::vector<const char*> names;
    if (const char* path = std::getenv("CUDAKIT_NCCL_LIBRARY"); path && *path) names.push_back(path);
    names.push_back("libnccl.so.2");
    names.push_back("libnccl.so");
    n->lib = load_library(
        {"NCCL", names,
         "install NCCL (libnccl2, or the nvidia-nccl wheel torch uses) and add its directory "
         "to LD_LIBRARY_PATH, or point CUDAKIT_NCCL_LIBRARY at libnccl.so.2",
         [](const LoadedLibrary& l) -> std::string {
           auto get = reinterpret_cast<int (*)(int*)>(l.symbol("ncclGetVersion"));
           int code = 0;
           if (!get || get(&code) != 0) return "";
           int major = 0, minor = 0, patch = 0;
           split_nccl_version(code, &major, &minor, &patch);
           return version_string(major, minor, patch);
         }},
        {bind_symbol("ncclGetVersion", n->api.ncclGetVersion),
         bind_symbol("ncclGetUniqueId", n->api.ncclGetUniqueId),
         bind_symbol("ncclCommInitRankConfig", n->api.ncclCommInitRankConfig),
         bind_symbol("ncclCommInitAll", n->api.ncclCommInitAll),
         bind_symbol("ncclCommDestroy", n->api.ncclCommDestroy),
         bind_symbol("ncclCommAbort", n->api.ncclCommAbort),
         bind_symbol("ncclCommGetAsyncError", n->api.ncclCommGetAsyncError),
         bind_symbol("ncclGetErrorString", n->api.ncclGetErrorString),
         bind_symbol("ncclGetLastError", n->api.ncclGetLastError, false),
         bind_symbol("ncclAllReduce", n->api.ncclAllReduce),
         bind_symbol("ncclBroadcast", n->api.ncclBroadcast),
         bind_symbol("ncclReduce", n->api.ncclReduce),
         bind_symbol("ncclAllGather", n->api.ncclAllGather),
         bind_symbol("ncclReduceScatter", n->api.ncclReduceScatter),
         bind_symbol("ncclSend", n->api.ncclSend),
         bind_symbol("ncclRecv", n->api.ncclRecv),
         bind_symbol("ncclGroupStart", n->api.ncclGroupStart),
         bind_symbol("ncclGroupEnd", n->api.ncclGroupEnd)});
    if (n->lib.available() && n->api.ncclGetVersion(&n->version_code) != 0) {
      n->lib.fail(n->lib.path() + ": ncclGetVersion failed");
    }
    return n;
  }();
  return *lib;
}

}  // namespace cudakit::detail::cuda
