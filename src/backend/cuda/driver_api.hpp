// The CUDA driver entry-point table, resolved at run time through cuGetProcAddress.
//
// cudakit never links libcuda: the first device call opens "libcuda.so.1" (through the
// shared loader, library_loader.hpp), looks up cuGetProcAddress_v2, and resolves every entry
// point below through it, once
// (std::call_once). Nothing here runs at static-initialisation time or at library load, so
// importing cudakit never initialises the driver (which would break fork()).
//
// ABI discipline. cuGetProcAddress(name, version) returns the newest ABI variant of `name`
// whose version is <= `version`. Each row names the PFN_ typedef (cudaTypedefs.h) whose
// prototype we call through, and the version we request. Two guards keep them in step:
//   * driver_api.cpp static_asserts that every PFN_ type equals the prototype cuda.h
//     declares for the (macro-mapped) name, e.g. cuMemAlloc -> cuMemAlloc_v2;
//   * check_entry_points.py verifies that the newest PFN_<name>_v<N> with N <= request is
//     exactly the row's PFN version (so the driver hands back that ABI).
// A symbol is accepted only when the driver's own version is >= the PFN version: an older
// driver would answer the request with an older, incompatible ABI.
//
// Most rows request 12080 (all current prototypes; works on 12.8+ and 13.x drivers). The
// green-context rows are optional: a driver without them makes only green contexts fail.
// cuStreamGetCtx requests 12000 because from 12050 on the name maps to the 3-argument
// green-context variant, while cuda.h's cuStreamGetCtx is the 2-argument one.
//
// Thread-safety: driver() is safe to call from any thread; the table is immutable after
// the one-time load.
#pragma once

#include <cuda.h>
#include <cudaProfilerTypedefs.h>  // PFN_cuProfilerStart/Stop (cudaProfiler.h)
#include <cudaTypedefs.h>

#include <string>

#include "backend/library_loader.hpp"

namespace cudakit::detail::cuda {

// X(name, pfn_version, request_version, required)
// `required` rows must resolve for the backend to be usable; the others are optional
// (callers check for nullptr and report NotSupportedError naming the entry point).
#define CUDAKIT_CUDA_ENTRY_POINTS(X)                         \
  X(cuGetErrorName, 6000, 12080, true)                        \
  X(cuGetErrorString, 6000, 12080, true)                      \
  X(cuInit, 2000, 12080, true)                                \
  X(cuDriverGetVersion, 2020, 12080, true)                    \
  X(cuDeviceGet, 2000, 12080, true)                           \
  X(cuDeviceGetCount, 2000, 12080, true)                      \
  X(cuDeviceGetName, 2000, 12080, true)                       \
  X(cuDeviceGetUuid, 11040, 12080, true)                      \
  X(cuDeviceTotalMem, 3020, 12080, true)                      \
  X(cuDeviceGetAttribute, 2000, 12080, true)                  \
  X(cuDeviceGetPCIBusId, 4010, 12080, true)                   \
  X(cuDeviceCanAccessPeer, 4000, 12080, true)                 \
  X(cuDevicePrimaryCtxRetain, 7000, 12080, true)              \
  X(cuDevicePrimaryCtxGetState, 7000, 12080, false)           \
  X(cuDevicePrimaryCtxRelease, 11000, 12080, false)           \
  X(cuCtxSetCurrent, 4000, 12080, true)                       \
  X(cuCtxGetCurrent, 4000, 12080, true)                       \
  X(cuCtxGetDevice, 2000, 12080, true)                        \
  X(cuCtxSynchronize, 2000, 12080, true)                      \
  X(cuCtxEnablePeerAccess, 4000, 12080, true)                 \
  X(cuCtxGetStreamPriorityRange, 5050, 12080, true)           \
  X(cuMemAlloc, 3020, 12080, true)                            \
  X(cuMemFree, 3020, 12080, true)                             \
  X(cuMemHostAlloc, 2020, 12080, true)                        \
  X(cuMemFreeHost, 2000, 12080, true)                         \
  X(cuMemHostRegister, 6050, 12080, false)                    \
  X(cuMemHostUnregister, 4000, 12080, false)                  \
  X(cuMemAllocAsync, 11020, 12080, false)                     \
  X(cuMemFreeAsync, 11020, 12080, false)                      \
  X(cuMemGetAllocationGranularity, 10020, 12080, false)       \
  X(cuMemAddressReserve, 10020, 12080, false)                 \
  X(cuMemAddressFree, 10020, 12080, false)                    \
  X(cuMemCreate, 10020, 12080, false)                         \
  X(cuMemRelease, 10020, 12080, false)                        \
  X(cuMemMap, 10020, 12080, false)                            \
  X(cuMemSetAccess, 10020, 12080, false)                      \
  X(cuMemUnmap, 10020, 12080, false)                          \
  X(cuMemExportToShareableHandle, 10020, 12080, false)        \
  X(cuMemImportFromShareableHandle, 10020, 12080, false)      \
  X(cuPointerGetAttribute, 4000, 12080, true)                 \
  X(cuMemGetInfo, 3020, 12080, true)                          \
  X(cuMemcpyAsync, 4000, 12080, true)                         \
  X(cuMemsetD8Async, 3020, 12080, true)                       \
  X(cuStreamCreateWithPriority, 5050, 12080, true)            \
  X(cuStreamDestroy, 4000, 12080, true)                       \
  X(cuStreamQuery, 2000, 12080, true)                         \
  X(cuStreamSynchronize, 2000, 12080, true)                   \
  X(cuStreamWaitEvent, 3020, 12080, true)                     \
  X(cuStreamGetPriority, 5050, 12080, true)                   \
  X(cuStreamGetDevice, 12080, 12080, false)                   \
  X(cuStreamGetId, 12000, 12080, true)                        \
  X(cuStreamGetCtx, 9020, 12000, true)                        \
  X(cuLaunchHostFunc, 10000, 12080, true)                     \
  X(cuEventCreate, 2000, 12080, true)                         \
  X(cuEventDestroy, 4000, 12080, true)                        \
  X(cuEventRecord, 2000, 12080, true)                         \
  X(cuEventQuery, 2000, 12080, true)                          \
  X(cuEventSynchronize, 2000, 12080, true)                    \
  X(cuEventElapsedTime, 12080, 12080, false)                  \
  X(cuIpcGetEventHandle, 4010, 12080, false)                  \
  X(cuIpcOpenEventHandle, 4010, 12080, false)                 \
  X(cuIpcGetMemHandle, 4010, 12080, false)                    \
  X(cuIpcOpenMemHandle, 11000, 12080, false)                  \
  X(cuIpcCloseMemHandle, 4010, 12080, false)                  \
  X(cuModuleLoadData, 2000, 12080, true)                      \
  X(cuModuleUnload, 2000, 12080, true)                        \
  X(cuModuleGetFunction, 2000, 12080, true)                   \
  X(cuLaunchKernel, 4000, 12080, true)                        \
  X(cuFuncGetName, 12030, 12080, false)                       \
  X(cuKernelGetName, 12030, 12080, false)                     \
  X(cuStreamBeginCapture, 10010, 12080, true)                 \
  X(cuStreamEndCapture, 10000, 12080, true)                   \
  X(cuStreamGetCaptureInfo, 12030, 12080, false)              \
  X(cuThreadExchangeStreamCaptureMode, 10010, 12080, false)    \
  X(cuGraphInstantiateWithFlags, 11040, 12080, true)          \
  X(cuGraphLaunch, 10000, 12080, true)                        \
  X(cuGraphDestroy, 10000, 12080, true)                       \
  X(cuGraphExecDestroy, 10000, 12080, true)                   \
  X(cuGraphExecUpdate, 12000, 12080, false)                   \
  X(cuGraphGetNodes, 10000, 12080, true)                      \
  X(cuGraphNodeGetType, 10000, 12080, true)                   \
  X(cuGraphKernelNodeGetParams, 12000, 12080, false)          \
  X(cuGraphHostNodeGetParams, 10000, 12080, false)            \
  X(cuGraphEventRecordNodeGetEvent, 11010, 12080, false)      \
  X(cuGraphEventWaitNodeGetEvent, 11010, 12080, false)        \
  X(cuGraphGetEdges, 12030, 12080, false)                     \
  X(cuGraphDebugDotPrint, 11030, 12080, false)               \
  X(cuUserObjectCreate, 11030, 12080, false)                  \
  X(cuUserObjectRelease, 11030, 12080, false)                 \
  X(cuGraphRetainUserObject, 11030, 12080, false)             \
  X(cuProfilerStart, 4000, 12080, false)                      \
  X(cuProfilerStop, 4000, 12080, false)                       \
  X(cuDeviceGetDevResource, 12040, 12080, false)              \
  X(cuDevSmResourceSplitByCount, 12040, 12080, false)         \
  X(cuDevResourceGenerateDesc, 12040, 12080, false)           \
  X(cuGreenCtxCreate, 12040, 12080, false)                    \
  X(cuGreenCtxDestroy, 12040, 12080, false)                   \
  X(cuGreenCtxGetDevResource, 12040, 12080, false)            \
  X(cuGreenCtxStreamCreate, 12050, 12080, false)

// Entry points newer than the CUDA 13.0 headers we build against, so there is no PFN_
// typedef to check against: prototypes are from NVIDIA's driver API reference. They have a
// single ABI version; we request them with the driver's own version (capped to 13.x, so a
// future re-versioned ABI is never picked up silently).
using PFN_cuGraphNodeGetToolsId_ext = CUresult(CUDAAPI*)(CUgraphNode, unsigned long long*);
using PFN_cuGraphNodeGetLocalId_ext = CUresult(CUDAAPI*)(CUgraphNode, unsigned int*);
using PFN_cuGraphExecGetId_ext = CUresult(CUDAAPI*)(CUgraphExec, unsigned int*);

struct EntryPoints {
  // Member names go through cuda.h's macros (cuMemAlloc -> cuMemAlloc_v2), which is harmless:
  // every use site is mapped the same way.
#define CUDAKIT_CUDA_DECLARE_MEMBER(name, pfn_version, request_version, required) \
  PFN_##name##_v##pfn_version name = nullptr;
  CUDAKIT_CUDA_ENTRY_POINTS(CUDAKIT_CUDA_DECLARE_MEMBER)
#undef CUDAKIT_CUDA_DECLARE_MEMBER
  PFN_cuGraphNodeGetToolsId_ext cuGraphNodeGetToolsId = nullptr;  // optional, driver > 13.0
  PFN_cuGraphNodeGetLocalId_ext cuGraphNodeGetLocalId = nullptr;  // optional, driver > 13.0
  PFN_cuGraphExecGetId_ext cuGraphExecGetId = nullptr;            // optional, driver > 13.0
};

// Outcome of the one-time load: the table plus why the backend is unusable, if it is.
struct DriverState {
  EntryPoints api;
  LoadedLibrary lib;        // libcuda.so.1 (for reports; `available` is the verdict)
  bool available = false;   // library loaded, required symbols resolved, cuInit succeeded
  int error_code = 0;       // CUresult-numbered reason when !available
  std::string error_name;   // e.g. "CUDA_ERROR_NO_DEVICE"
  std::string reason;       // human-readable, "" when available
  int driver_version = 0;   // cuDriverGetVersion, 0 when no driver
  int device_count = 0;     // visible devices (CUDA_VISIBLE_DEVICES applied by the driver)
};

// Loads the driver on first call (dlopen + cuGetProcAddress + cuInit(0) + device count).
// Never throws; inspect `available`.
const DriverState& driver() noexcept;

}  // namespace cudakit::detail::cuda
