// The driver / runtime calls the tracer records as API records (those that enqueue device
// work, where a kernel's launch -> kernel flow starts, and the waits), and the two ways of
// recording them (CUDAKIT_CUPTI_API):
//
//   activity   CUPTI's DRIVER / RUNTIME activity kinds, every other callback id switched off
//              (Kineto's way). Measured on an H100/H200 (bench_profiler, 20k tiny launches from
//              C++): 1.12x the untraced loop, against 1.04x with no API records at all; the
//              issue-28 goal is 1.05x.
//   callbacks  CUPTI's API callbacks for exactly these ids: the enter callback stores the
//              start time in the call's correlation data, the exit callback writes the record
//              on the calling thread (the collector's per-thread buffer: no lock, no copy at
//              flush). Same records (name, times on the tracer's clock, correlation id, thread
//              id); whether CUPTI's callback dispatch costs less than its activity records is
//              what the breakdown row of bench_profiler measures.
//
// Included only where CUPTI's headers are (cupti_activity.cpp).
#pragma once

#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>

#include <algorithm>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

namespace cudakit::detail::cuda {

inline constexpr CUpti_CallbackId kDriverCalls[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,       CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,          CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,   CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,   CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,   CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,          CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc,       CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,       CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,      CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz,
};
inline constexpr CUpti_CallbackId kRuntimeCalls[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000,
};

inline bool listed(std::span<const CUpti_CallbackId> ids, CUpti_CallbackId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

enum class ApiRecording { activity, callbacks };

// CUDAKIT_CUPTI_API=activity|callbacks, read when a trace starts (default: activity). An
// unknown value is refused with a message naming the two, so a typo does not silently
// measure the other way.
inline ApiRecording api_recording_from_env(std::string* error) {
  const char* v = std::getenv("CUDAKIT_CUPTI_API");
  if (v == nullptr || *v == '\0' || std::string_view(v) == "activity") return ApiRecording::activity;
  if (std::string_view(v) == "callbacks") return ApiRecording::callbacks;
  *error = std::string("CUDAKIT_CUPTI_API=") + v +
           " is not a way of recording API calls: use activity (the default) or callbacks; "
           "recorded through activity records";
  return ApiRecording::activity;
}

}  // namespace cudakit::detail::cuda
