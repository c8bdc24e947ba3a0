// IPC sharing of caching-allocator memory. Export hands out the handle of the whole device
// segment containing the allocation plus the offset; import opens each segment once per
// process and reference-counts it; ipc_collect closes segments nobody references.
// The driver's close runs outside the registry's mutex (locks.hpp: a release may wait for the
// device, and ipc_close may be called by a finaliser).
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <vector>

#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "memory/device_allocator.hpp"
#include "memory/locks.hpp"

namespace cudakit {
namespace {
struct Opened {
  void* base = nullptr;
  int refs = 0;
};
std::mutex g_ipc_mutex;
std::map<std::string, Opened> g_opened;             // handle bytes -> mapping
std::map<void*, std::string> g_user_ptr_to_handle;  // returned pointer -> handle key
std::map<std::string, int> g_exported;              // handles this process exported
}  // namespace

IpcMemHandle ipc_export(void* ptr) {
  auto info = allocation_info(ptr);
  if (!info)
    throw ValueError("ipc_export: pointer is not a live allocation of cudakit's caching "
                     "allocator");
  IpcMemHandle h;
  // The driver exports whole allocations: export the segment and the offset inside it.
  const std::uintptr_t base = memory::device_allocator(info->device).segment_base(ptr);
  detail::IpcHandle raw = detail::backend().mem_ipc_handle(reinterpret_cast<void*>(base));
  std::copy(std::begin(raw.bytes), std::end(raw.bytes), h.bytes);
  {
    std::lock_guard lock(g_ipc_mutex);
    g_exported[std::string(reinterpret_cast<const char*>(h.bytes), sizeof h.bytes)] = info->device;
  }
  h.device = info->device;
  h.offset = reinterpret_cast<std::uintptr_t>(ptr) - base;
  h.size = info->requested;
  return h;
}

void* ipc_import(const IpcMemHandle& handle) {
  const int n = detail::backend().device_count();
  if (handle.device < 0 || handle.device >= n)
    throw ValueError("ipc_import: handle.device " + std::to_string(handle.device) +
                     " is not a device of this process (valid: 0.." + std::to_string(n - 1) +
                     ")");
  if (handle.size == 0 || handle.offset > SIZE_MAX - handle.size)
    throw ValueError("ipc_import: handle.offset " + std::to_string(handle.offset) +
                     " + handle.size " + std::to_string(handle.size) +
                     " is not a valid range (a handle from ipc_export has size >= 1 and "
                     "offset + size within the exported segment)");
  std::string key(reinterpret_cast<const char*>(handle.bytes), sizeof handle.bytes);
  std::lock_guard lock(g_ipc_mutex);
  // No backend opens a handle in the process that exported it (CUDA answers
  // CUDA_ERROR_INVALID_CONTEXT, and the emulated backend does the same); say so clearly.
  if (g_exported.count(key))
    throw ValueError("ipc_import: this handle was exported by this process, and CUDA cannot "
                     "open an IPC handle in the exporting process: use the original pointer "
                     "here, and import the handle in another process");
  Opened& o = g_opened[key];
  if (!o.base) {
    detail::IpcHandle raw;
    std::copy(std::begin(handle.bytes), std::end(handle.bytes), raw.bytes);
    try {
      o.base = detail::backend().mem_open_ipc(raw);
    } catch (...) {
      g_opened.erase(key);
      throw;
    }
  }
  const auto base = reinterpret_cast<std::uintptr_t>(o.base);
  if (base > UINTPTR_MAX - handle.offset - handle.size)
    throw ValueError("ipc_import: handle.offset " + std::to_string(handle.offset) +
                     " + handle.size " + std::to_string(handle.size) +
                     " runs past the end of the address space from the segment's base");
  ++o.refs;
  void* p = reinterpret_cast<void*>(base + handle.offset);
  g_user_ptr_to_handle[p] = key;
  return p;
}

void ipc_close(void* ptr) {
  std::lock_guard lock(g_ipc_mutex);
  auto it = g_user_ptr_to_handle.find(ptr);
  if (it == g_user_ptr_to_handle.end())
    throw ValueError("ipc_close: pointer was not returned by ipc_import");
  --g_opened[it->second].refs;
  g_user_ptr_to_handle.erase(it);
}

void ipc_collect() {
  std::vector<void*> close;
  {
    std::lock_guard lock(g_ipc_mutex);
    for (auto it = g_opened.begin(); it != g_opened.end();) {
      if (it->second.refs <= 0) {
        if (it->second.base) close.push_back(it->second.base);
        it = g_opened.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::exception_ptr error;
  memory::WaitScope wait;
  for (void* base : close) {
    try {
      detail::backend().mem_close_ipc(base);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace cudakit
