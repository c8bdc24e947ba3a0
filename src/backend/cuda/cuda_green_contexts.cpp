// CudaBackend: green contexts (SM partitions), on the driver's resource API:
// cuDeviceGetDevResource -> cuDevSmResourceSplitByCount -> cuDevResourceGenerateDesc ->
// cuGreenCtxCreate, and cuGreenCtxStreamCreate for their streams.
//
// Green contexts are never made current here. A green stream carries its context, so every
// stream call (launches included) runs on the partition while the thread keeps the device's
// primary context current; pushing the green context instead would move all of the thread's
// null-stream work (other libraries' too) onto the partition, and cuda.h allows a green
// context to be current on one thread at a time only.
#include "backend/cuda/cuda_backend.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

CUgreenCtx green(GreenContextHandle g) { return static_cast<CUgreenCtx>(g); }

CUdevResource sm_resource_of(const EntryPoints& t, CUdevice dev) {
  CUdevResource r{};
  check(CUDAKIT_CU_OPTIONAL(t, cuDeviceGetDevResource)(dev, &r, CU_DEV_RESOURCE_TYPE_SM),
        "cuDeviceGetDevResource");
  return r;
}

}  // namespace

SmResourceInfo CudaBackend::device_sm_resource(int device) {
  const EntryPoints& t = api("device_sm_resource");
  CUdevResource r = sm_resource_of(t, cu_device(device, "device_sm_resource"));
  SmResourceInfo info;
  info.sm_count = static_cast<int>(r.sm.smCount);
  info.min_partition_sms = static_cast<int>(r.sm.minSmPartitionSize);
  info.sm_alignment = static_cast<int>(r.sm.smCoscheduledAlignment);
  // Drivers before 12.8 leave the two rule fields zero: use cuda.h's guideline by
  // architecture (9.0+: at least 8 SMs, multiples of 8; 8.x: 4 and 2; older: 2 and 2).
  if (info.min_partition_sms <= 0 || info.sm_alignment <= 0) {
    int major = 0;
    check(t.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                 cu_device(device, "device_sm_resource")),
          "cuDeviceGetAttribute");
    info.min_partition_sms = major >= 9 ? 8 : major == 8 ? 4 : 2;
    info.sm_alignment = major >= 9 ? 8 : 2;
  }
  return info;
}

GreenContextHandle CudaBackend::green_context_create(int device, int sm_count, int* granted) {
  const EntryPoints& t = api("green_context_create");
  auto split = CUDAKIT_CU_OPTIONAL(t, cuDevSmResourceSplitByCount);
  auto describe = CUDAKIT_CU_OPTIONAL(t, cuDevResourceGenerateDesc);
  auto create = CUDAKIT_CU_OPTIONAL(t, cuGreenCtxCreate);
  CUdevice dev = cu_device(device, "green_context_create");
  // The primary context first: cuGreenCtxCreate retains it, and creating it from inside that
  // call would initialise and tear down the device around every green context (cuda.h).
  context(device, "green_context_create");
  CUdevResource whole = sm_resource_of(t, dev);
  CUdevResource part{};
  unsigned groups = 1;
  check(split(&part, &groups, &whole, nullptr, 0, static_cast<unsigned>(sm_count)),
        "cuDevSmResourceSplitByCount");
  if (groups != 1) {
    throw AcceleratorError(errc::invalid_resource_configuration,
                           "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
                           "green_context_create: cuDevSmResourceSplitByCount made no group of " +
                               std::to_string(sm_count) + " SMs on device " +
                               std::to_string(device) + " (" + std::to_string(whole.sm.smCount) +
                               " SMs)");
  }
  CUdevResourceDesc desc = nullptr;
  check(describe(&desc, &part, 1), "cuDevResourceGenerateDesc");
  CUgreenCtx g = nullptr;
  check(create(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
  if (granted) {
    *granted = static_cast<int>(part.sm.smCount);
    CUdevResource mine{};
    if (t.cuGreenCtxGetDevResource &&
        t.cuGreenCtxGetDevResource(g, &mine, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS) {
      *granted = static_cast<int>(mine.sm.smCount);
    }
  }
  return g;
}

void CudaBackend::green_context_destroy(GreenContextHandle g) {
  if (!g || is_shutting_down()) return;
  const EntryPoints& t = api("green_context_destroy");
  CUresult rc = CUDAKIT_CU_OPTIONAL(t, cuGreenCtxDestroy)(green(g));
  if (rc != CUDA_ERROR_DEINITIALIZED) check(rc, "cuGreenCtxDestroy");
}

StreamHandle CudaBackend::green_context_stream_create(GreenContextHandle g, int priority) {
  const EntryPoints& t = api("green_context_stream_create");
  CUstream s = nullptr;
  // CU_STREAM_NON_BLOCKING is required by the driver for green-context streams.
  check(CUDAKIT_CU_OPTIONAL(t, cuGreenCtxStreamCreate)(&s, green(g), CU_STREAM_NON_BLOCKING,
                                                      priority),
        "cuGreenCtxStreamCreate");
  return s;
}

}  // namespace cudakit::detail::cuda
