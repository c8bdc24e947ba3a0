// NCCL, loaded at run time through the shared loader (library_loader.hpp), never linked: a
// process that never communicates never maps it, and one built without NCCL's headers can
// still use whatever libnccl the machine has (torch's wheel, the CUDA toolkit's, the
// system's).
//
// Prototypes are declared from nccl.h's documented C ABI (the library keeps it stable across
// 2.x), so building needs no NCCL header. Enums (ncclResult_t, ncclDataType_t, ncclRedOp_t)
// are C enums passed as int, with the values of collectives.hpp. ncclUniqueId is a struct of
// 128 bytes passed by value.
//
// Where it is looked for: $CUDAKIT_NCCL_LIBRARY (a path or soname) first, then libnccl.so.2
// and libnccl.so on the loader's search path.
//
// Thread-safety: nccl() loads once (function-local static) and returns an immutable table.
#pragma once

#include <climits>
#include <cstddef>

#include "backend/library_loader.hpp"

namespace cudakit::detail::cuda {

struct NcclUniqueIdRaw {
  char internal[128];
};

// ncclConfig_t as NCCL 2.17 laid it out (up to splitShare). NCCL reads min(size, its own
// sizeof) bytes and takes its defaults for fields a config's version predates, so this prefix
// works with every NCCL from 2.17 on.
struct NcclConfig {
  std::size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
};
inline NcclConfig nccl_config(bool blocking) {
  return NcclConfig{sizeof(NcclConfig), 0xcafebeefu, 21700u, blocking ? 1 : 0,
                    INT_MIN, INT_MIN, INT_MIN, nullptr, INT_MIN};
}

inline constexpr int kNcclSuccess = 0, kNcclInProgress = 7;

struct NcclApi {
  int (*ncclGetVersion)(int* version) = nullptr;
  int (*ncclGetUniqueId)(NcclUniqueIdRaw* id) = nullptr;
  int (*ncclCommInitRankConfig)(void** comm, int nranks, NcclUniqueIdRaw id, int rank,
                                NcclConfig* config) = nullptr;
  int (*ncclCommInitAll)(void** comms, int ndev, const int* devlist) = nullptr;
  int (*ncclCommDestroy)(void* comm) = nullptr;
  int (*ncclCommAbort)(void* comm) = nullptr;
  int (*ncclCommGetAsyncError)(void* comm, int* async_error) = nullptr;
  const char* (*ncclGetErrorString)(int result) = nullptr;
  const char* (*ncclGetLastError)(void* comm) = nullptr;  // optional (2.13+)
  int (*ncclAllReduce)(const void* send, void* recv, std::size_t count, int type, int op,
                       void* comm, void* stream) = nullptr;
  int (*ncclBroadcast)(const void* send, void* recv, std::size_t count, int type, int root,
                       void* comm, void* stream) = nullptr;
  int (*ncclReduce)(const void* send, void* recv, std::size_t count, int type, int op,
                    int root, void* comm, void* stream) = nullptr;
  int (*ncclAllGather)(const void* send, void* recv, std::size_t send_count, int type,
                       void* comm, void* stream) = nullptr;
  int (*ncclReduceScatter)(const void* send, void* recv, std::size_t recv_count, int type,
                           int op, void* comm, void* stream) = nullptr;
  int (*ncclSend)(const void* send, std::size_t count, int type, int peer, void* comm,
                  void* stream) = nullptr;
  int (*ncclRecv)(void* recv, std::size_t count, int type, int peer, void* comm,
                  void* stream) = nullptr;
  int (*ncclGroupStart)() = nullptr;
  int (*ncclGroupEnd)() = nullptr;
};

struct Nccl {
  NcclApi api;
  LoadedLibrary lib;
  int version_code = 0;  // ncclGetVersion's answer
};

// Loaded on first call; never throws (inspect lib.available()). ncclCommInitRankConfig
// (2.14+) is required: non-blocking initialization is what lets a dead peer be timed out.
const Nccl& nccl() noexcept;

}  // namespace cudakit::detail::cuda
