// The vocabulary several topics of the driver seam share: handle aliases and the small value
// types that cross topic boundaries (an event's IPC handle and memory's; the capture state
// the sanitizer and the allocator read without calling into graphs). Types only one topic
// uses live in that topic's header. No interface here: headers that only store a handle
// (graph state, sanitizer records) include this and nothing of the interfaces.
#pragma once

#include <cstdint>

#include "cudakit/stream.hpp"

namespace cudakit::detail {

using StreamHandle = NativeStream;  // CUstream on cuda (public alias, stream.hpp)
using EventHandle = NativeEvent;    // CUevent on cuda
using GraphHandle = void*;      // CUgraph on cuda
using GraphExecHandle = void*;  // CUgraphExec on cuda
using PhysMemHandle = std::uint64_t;  // CUmemGenericAllocationHandle on cuda
using ModuleHandle = void*;     // CUmodule on cuda
using FunctionHandle = void*;   // CUfunction on cuda
using GreenContextHandle = void*;  // CUgreenCtx on cuda
using GdsFileHandle = void*;       // CUfileHandle_t on cuda

enum class CaptureMode { global = 0, thread_local_ = 1, relaxed = 2 };
enum class CaptureStatus { none = 0, active = 1, invalidated = 2 };

struct IpcHandle {  // 64 opaque bytes, as CUipcEventHandle / CUipcMemHandle
  unsigned char bytes[64] = {};
};

}  // namespace cudakit::detail
