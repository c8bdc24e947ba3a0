// Emulated device memory: aligned host memory accounted against each device's limit, a
// range map for pointer→device queries, pinned host memory, stream-ordered allocation and
// memory IPC handles (exported, but opened nowhere: not in the exporting process, as CUDA,
// and not in another one, which cannot see this process's memory).
#include <chrono>
#include <thread>
#include <cstdlib>

#include "backend/emulated/ipc.hpp"
#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {
constexpr std::size_t kAlign = 256;  // cudaMalloc guarantees at least 256-byte alignment
std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }
}  // namespace

bool EmulatedBackend::reserve_bytes(Device& d, std::size_t bytes) {
  auto try_reserve = [&] {
    std::size_t used = d.used.load(std::memory_order_relaxed);
    do {
      if (bytes > d.limit || used > d.limit - bytes) return false;
    } while (!d.used.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  };
  if (try_reserve()) return true;
  // cuMemFree returns once the device finished the work queued before it, so the memory is
  // free for the next allocation; here a free waits for that work asynchronously
  // (free_device), and a request that would fit once it has run waits for it a while
  // (bounded: a stream blocked on the host thread that asks must not hang it). Never on a
  // stream's worker, whose own queue may be what the free waits for.
  if (on_stream_worker() || bytes > d.limit) return false;
  for (int i = 0; i < 20000 && frees_pending_.load(std::memory_order_acquire); ++i) {
    reap_freed();
    if (try_reserve()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return try_reserve();
}

void EmulatedBackend::release_bytes(Device& d, std::size_t bytes) {
  d.used.fetch_sub(bytes, std::memory_order_relaxed);
}

void* EmulatedBackend::alloc_device(int device, std::size_t bytes) {
  Device& d = dev(device);
  std::size_t size = round_up(bytes == 0 ? 1 : bytes, kAlign);
  if (!reserve_bytes(d, size)) return nullptr;
  void* p = nullptr;
  if (::posix_memalign(&p, kAlign, size) != 0 || p == nullptr) {
    release_bytes(d, size);
    return nullptr;  // host is out of memory: report as device OOM
  }
  auto base = reinterpret_cast<std::uintptr_t>(p);
  std::unique_lock lock(ranges_mu_);
  ranges_[base] = Range{base + size, device, false, size};
  return p;
}

void EmulatedBackend::free_device(void* ptr, const char* what, bool after_queued_work) {
  if (ptr == nullptr) return;
  Range r{};
  {
    std::unique_lock lock(ranges_mu_);
    auto it = ranges_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == ranges_.end() || it->second.vm) {
      throw_accelerator_error(errc::invalid_value,
                              std::string(what) + ": pointer is not the start of a live "
                                                  "emulated device allocation");
    }
    r = it->second;
    ranges_.erase(it);  // the address stays reserved (not freed to libc) until released
  }
  std::vector<Dep> until;
  if (after_queued_work) {
    for (auto& d : devices_) {  // every device: a peer copy may still read this memory
      std::lock_guard dl(d->mu);
      for (auto& st : d->streams) {
        std::lock_guard sl(st->mu);
        if (st->enqueued > st->completed) until.push_back(Dep{st, st->enqueued});
      }
      if (d->legacy) {
        std::lock_guard ll(d->legacy->mu);
        if (d->legacy->enqueued > d->legacy->completed) {
          until.push_back(Dep{d->legacy, d->legacy->enqueued});
        }
      }
    }
  }
  if (until.empty()) {
    std::free(ptr);
    release_bytes(*devices_[static_cast<std::size_t>(r.device)], r.accounted);
    return;
  }
  std::lock_guard lock(pending_frees_mu_);
  pending_frees_.push_back(PendingFree{ptr, r.device, r.accounted, std::move(until)});
  frees_pending_.store(true, std::memory_order_release);
}

void EmulatedBackend::reap_freed() {
  if (!frees_pending_.load(std::memory_order_acquire)) return;
  std::vector<PendingFree> done;
  {
    std::lock_guard lock(pending_frees_mu_);
    std::size_t keep = 0;
    for (std::size_t i = 0; i < pending_frees_.size(); ++i) {
      PendingFree& f = pending_frees_[i];
      bool ran = true;
      for (const Dep& dep : f.until) ran = ran && reached(*dep.stream, dep.seq);
      if (ran) {
        done.push_back(std::move(f));
      } else if (keep != i) {
        pending_frees_[keep++] = std::move(f);
      } else {
        ++keep;
      }
    }
    pending_frees_.resize(keep);
    frees_pending_.store(keep != 0, std::memory_order_release);
  }
  for (PendingFree& f : done) {
    std::free(f.ptr);
    release_bytes(*devices_[static_cast<std::size_t>(f.device)], f.accounted);
  }
}

void* EmulatedBackend::mem_alloc(int device, std::size_t bytes) {
  check_unsafe_call("mem_alloc");
  reap_freed();
  return alloc_device(device, bytes);
}

void EmulatedBackend::mem_free(int, void* ptr) {
  free_device(ptr, "mem_free", /*after_queued_work=*/true);
}

void* EmulatedBackend::host_alloc_pinned(std::size_t bytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, round_up(bytes == 0 ? 1 : bytes, kAlign)) != 0) return nullptr;
  std::lock_guard lock(pinned_mu_);
  pinned_.insert(p);
  return p;
}

void EmulatedBackend::host_free_pinned(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard lock(pinned_mu_);
    if (pinned_.erase(ptr) == 0) {
      throw_accelerator_error(errc::invalid_value,
                              "host_free_pinned: pointer was not returned by host_alloc_pinned");
    }
  }
  std::free(ptr);
}

// Registration only records the range: emulated "pinned" memory is ordinary host memory.
bool EmulatedBackend::host_register(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    throw_accelerator_error(errc::invalid_value, "host_register: null pointer or zero size");
  }
  std::lock_guard lock(pinned_mu_);
  if (!registered_.emplace(ptr, bytes).second) {
    throw_accelerator_error(errc::invalid_value,
                            "host_register: the range is already registered");
  }
  return true;
}

void EmulatedBackend::host_unregister(void* ptr) {
  std::lock_guard lock(pinned_mu_);
  if (registered_.erase(ptr) == 0) {
    throw_accelerator_error(errc::invalid_value,
                            "host_unregister: pointer was not passed to host_register");
  }
}

// Stream-ordered allocation. The memory is taken immediately (ordering is trivially kept:
// nothing later in the stream can run before the call returns); the free is enqueued and the
// bytes return to the device when the stream reaches it.
// Under capture: mem_alloc_async allocates eagerly and records a mem_alloc node (no replay
// work; the memory then belongs to the caller, as a graph allocation that outlives the graph
// does on CUDA); mem_free_async records a mem_free node and the memory is released when the
// graph and all its instantiations are destroyed (replays keep using it until then).
void* EmulatedBackend::mem_alloc_async(int device, std::size_t bytes, StreamHandle s) {
  Stream* st = resolve(s);
  void* p = alloc_device(device, bytes);
  if (p && st->capturing.load(std::memory_order_acquire)) {
    try {
      capture_node(*st, GraphNodeType::mem_alloc, "mem_alloc", {});
    } catch (...) {
      free_device(p, "mem_alloc_async");
      throw;
    }
  }
  return p;
}

void EmulatedBackend::mem_free_async(void* ptr, StreamHandle s) {
  if (ptr == nullptr) return;
  Stream* st = resolve(s);
  {
    std::shared_lock lock(ranges_mu_);
    auto it = ranges_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == ranges_.end() || it->second.vm) {
      throw_accelerator_error(errc::invalid_value,
                              "mem_free_async: pointer is not the start of a live emulated "
                              "device allocation");
    }
  }
  if (capture_node(*st, GraphNodeType::mem_free, "mem_free", {})) {
    std::lock_guard lock(capture_mu_);
    if (st->cap) {
      st->cap->graph->on_destroy.push_back([this, ptr] { free_device(ptr, "graph mem_free"); });
    }
    return;
  }
  submit(*st, [this, ptr] { free_device(ptr, "mem_free_async"); });
}

int EmulatedBackend::pointer_device(const void* ptr) {
  auto p = reinterpret_cast<std::uintptr_t>(ptr);
  std::shared_lock lock(ranges_mu_);
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return -1;
  --it;
  return p < it->second.end ? it->second.device : -1;
}

IpcHandle EmulatedBackend::mem_ipc_handle(void* ptr) {
  auto p = reinterpret_cast<std::uintptr_t>(ptr);
  std::shared_lock lock(ranges_mu_);
  auto it = ranges_.upper_bound(p);
  if (it != ranges_.begin()) {
    --it;
    if (p < it->second.end && !it->second.vm) {
      return encode_ipc(2, it->first, it->second.end - it->first, it->second.device);
    }
  }
  throw_accelerator_error(errc::invalid_value,
                          "mem_ipc_handle: pointer is not inside a live emulated device "
                          "allocation (VM mappings cannot be shared by IPC handle)");
  return {};
}

void* EmulatedBackend::mem_open_ipc(const IpcHandle& h) {
  IpcPayload p = decode_ipc(h, 2, "mem_open_ipc");  // another process's handle: not_supported
  {
    std::shared_lock lock(ranges_mu_);
    auto it = ranges_.find(p.id);
    if (it == ranges_.end() || it->second.end - it->first != p.extra) {
      throw_accelerator_error(errc::invalid_value,
                              "mem_open_ipc: the shared allocation has been freed");
    }
  }
  // As CUDA: a memory handle cannot be opened by the process that exported it. Refusing here
  // too keeps callers free of a per-backend branch (the exporter uses its own pointer).
  throw_accelerator_error(errc::invalid_context,
                          "mem_open_ipc: this IPC handle was exported by this process, and a "
                          "memory handle cannot be opened in the exporting process (CUDA "
                          "answers CUDA_ERROR_INVALID_CONTEXT); use the original pointer here");
  return nullptr;
}

void EmulatedBackend::mem_close_ipc(void*) {
  // mem_open_ipc never succeeds here, so no pointer can have come from it.
  throw_accelerator_error(errc::invalid_value,
                          "mem_close_ipc: pointer was not opened with mem_open_ipc");
}

}  // namespace cudakit::detail::emulated
