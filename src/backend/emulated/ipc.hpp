// IPC handle encoding shared by events.cpp and memory.cpp. The emulated device lives in this
// process's memory, so another process cannot open a handle (NotSupported, with an
// explanation); event handles open in the process that made them, memory handles nowhere
// (CUDA refuses them in the exporting process).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {

struct IpcPayload {
  char magic[8];         // "ckEMUipc"
  std::uint32_t kind;    // 1 = event, 2 = memory
  std::int32_t pid;
  std::uint64_t id;      // event id / allocation base
  std::uint64_t extra;   // allocation size
  std::int32_t device;
};
static_assert(sizeof(IpcPayload) <= sizeof(IpcHandle::bytes));

inline IpcHandle encode_ipc(std::uint32_t kind, std::uint64_t id, std::uint64_t extra,
                            int device) {
  IpcPayload p{};
  std::memcpy(p.magic, "ckEMUipc", 8);
  p.kind = kind;
  p.pid = static_cast<std::int32_t>(::getpid());
  p.id = id;
  p.extra = extra;
  p.device = device;
  IpcHandle h;
  std::memcpy(h.bytes, &p, sizeof p);
  return h;
}

inline IpcPayload decode_ipc(const IpcHandle& h, std::uint32_t kind, const char* what) {
  IpcPayload p{};
  std::memcpy(&p, h.bytes, sizeof p);
  if (std::memcmp(p.magic, "ckEMUipc", 8) != 0 || p.kind != kind) {
    throw_accelerator_error(errc::invalid_value,
                            std::string(what) + ": not an IPC handle made by the emulated "
                                                "backend (or the wrong kind of handle)");
  }
  if (p.pid != static_cast<std::int32_t>(::getpid())) {
    throw AcceleratorError(
        errc::not_supported, error_code_name(errc::not_supported),
        std::string(what) + ": this IPC handle comes from process " + std::to_string(p.pid) +
            "; the emulated backend keeps device memory inside its own process, so IPC "
            "handles can only be opened by the process that created them (use the cuda "
            "backend for cross-process sharing)");
  }
  return p;
}

}  // namespace cudakit::detail::emulated
