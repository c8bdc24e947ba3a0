// Internal to src/nvtx: the one place that includes NVTX3's C API, or compiles without it.
//
// CUDAKIT_WITH_NVTX comes from CMake (1 when nvtx3/nvToolsExt.h was found). With 0 the module
// keeps its own bookkeeping (depths, ids, domains, categories) and forwards nothing, so the
// public API behaves the same minus the tool: that path is built and tested on every machine
// by the test_nvtx_noop target.
//
// NVTX3 is header-only: its functions are hidden inline definitions, so libcudakit carries one
// private NVTX instance, initialised (tool lookup through NVTX_INJECTION64_PATH) at its first
// call, and never at library load.
#pragma once

#include "cudakit/nvtx.hpp"

#ifndef CUDAKIT_WITH_NVTX
#if __has_include(<nvtx3/nvToolsExt.h>)
#define CUDAKIT_WITH_NVTX 1
#else
#define CUDAKIT_WITH_NVTX 0
#endif
#endif

#if CUDAKIT_WITH_NVTX
#define NVTX_AS_SYSTEM_HEADER
#include <nvtx3/nvToolsExt.h>
#endif

namespace cudakit::nvtx::detail {

#if CUDAKIT_WITH_NVTX
inline nvtxDomainHandle_t handle_of(const Domain& d) noexcept {
  return static_cast<nvtxDomainHandle_t>(d.handle());
}

// NVTX's event record for `a` (only the fields that are set).
inline nvtxEventAttributes_t event_attributes(const Attributes& a) noexcept {
  nvtxEventAttributes_t ev{};
  ev.version = NVTX_VERSION;
  ev.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  ev.category = a.category;
  if (a.color.is_set()) {
    ev.colorType = NVTX_COLOR_ARGB;
    ev.color = a.color.argb;
  }
  switch (a.payload.kind()) {
    case Payload::Kind::int64:
      ev.payloadType = NVTX_PAYLOAD_TYPE_INT64;
      ev.payload.llValue = a.payload.as_int64();
      break;
    case Payload::Kind::uint64:
      ev.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
      ev.payload.ullValue = a.payload.as_uint64();
      break;
    case Payload::Kind::float64:
      ev.payloadType = NVTX_PAYLOAD_TYPE_DOUBLE;
      ev.payload.dValue = a.payload.as_double();
      break;
    case Payload::Kind::none:
      break;
  }
  if (a.message) {
    ev.messageType = NVTX_MESSAGE_TYPE_ASCII;  // NVTX's "ASCII" strings are UTF-8 bytes to tools
    ev.message.ascii = a.message;
  }
  return ev;
}
#endif

}  // namespace cudakit::nvtx::detail
