// CudaBackend: factory, identity, devices, primary contexts and the thread's current device.
#include <cstring>

#include "backend/cuda/cuda_backend.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail {

// Creating the backend touches nothing: the driver loads on the first call that needs it.
std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<cuda::CudaBackend>(); }

}  // namespace cudakit::detail

namespace cudakit::detail::cuda {

CudaBackend::CudaBackend() = default;
CudaBackend::~CudaBackend() = default;

int CudaBackend::device_count() noexcept { return driver().device_count; }

std::string CudaBackend::unavailable_reason() noexcept {
  try {
    return driver().reason;
  } catch (...) {
    return "unknown";
  }
}

int CudaBackend::driver_version() noexcept { return driver().driver_version; }

// ---- device slots and contexts ----

void CudaBackend::build_slots() {
  const DriverState& s = driver();
  slots_ = std::make_unique<DeviceSlot[]>(static_cast<std::size_t>(s.device_count));
  for (int i = 0; i < s.device_count; ++i) {
    check(s.api.cuDeviceGet(&slots_[i].dev, i), "cuDeviceGet");
  }
  slot_count_ = s.device_count;
}

CudaBackend::DeviceSlot& CudaBackend::slot(int device, const char* what) {
  api(what);  // throws when the driver is unusable
  std::call_once(slots_once_, [this] { build_slots(); });
  if (device < 0 || device >= slot_count_) [[unlikely]] {
    throw AcceleratorError(errc::invalid_device, "CUDA_ERROR_INVALID_DEVICE",
                           std::string(what) + ": invalid device ordinal " +
                               std::to_string(device) + ": this process sees " +
                               std::to_string(slot_count_) +
                               " CUDA device(s) (valid: 0.." + std::to_string(slot_count_ - 1) +
                               "; CUDA_VISIBLE_DEVICES applies)");
  }
  return slots_[device];
}

CUdevice CudaBackend::cu_device(int device, const char* what) { return slot(device, what).dev; }

CUcontext CudaBackend::context(int device, const char* what) {
  DeviceSlot& d = slot(device, what);
  if (CUcontext c = d.ctx.load(std::memory_order_acquire)) [[likely]] return c;
  std::call_once(d.ctx_once, [&] {
    CUcontext c = nullptr;
    check(api(what).cuDevicePrimaryCtxRetain(&c, d.dev), "cuDevicePrimaryCtxRetain");
    d.ctx.store(c, std::memory_order_release);
  });
  return d.ctx.load(std::memory_order_acquire);
}

int CudaBackend::ordinal_of(CUdevice dev) {
  std::call_once(slots_once_, [this] { build_slots(); });
  for (int i = 0; i < slot_count_; ++i) {
    if (slots_[i].dev == dev) return i;
  }
  return -1;
}

int CudaBackend::device_of_current_context(CUcontext* current) {
  const EntryPoints& t = driver().api;
  CUcontext c = nullptr;
  if (t.cuCtxGetCurrent(&c) != CUDA_SUCCESS) c = nullptr;
  if (current) *current = c;
  if (!c) return -1;
  CUdevice dev = 0;
  if (t.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
  int ordinal = ordinal_of(dev);
  // Cache the answer only for the device's primary context (ours, or the same one made current
  // by another library such as the CUDA runtime: retaining returns that handle). With a
  // foreign context current the device is reported but stays "unknown", so ContextScope never
  // restores the wrong context.
  if (ordinal >= 0 && context(ordinal, "current_device") == c) thread_current_device() = ordinal;
  return ordinal;
}

void CudaBackend::ensure_current_context(const char* what) {
  if (thread_current_device() >= 0) [[likely]] return;
  api(what);  // throws when the driver is unusable
  CUcontext c = nullptr;
  device_of_current_context(&c);
  if (c) return;          // some context is current (ours is now cached if it is ours)
  set_current_device(0);  // as the CUDA runtime does: a fresh thread starts on device 0
}

void CudaBackend::ensure_context_slow(StreamHandle s, const char* what) {
  if (!s) {
    ensure_current_context(what);
    return;
  }
  const EntryPoints& t = api(what);
  CUcontext c = nullptr;
  device_of_current_context(&c);
  if (c) return;
  check(t.cuStreamGetCtx(static_cast<CUstream>(s), &c), "cuStreamGetCtx");
  check(t.cuCtxSetCurrent(c), "cuCtxSetCurrent");
  device_of_current_context(nullptr);
}

CudaBackend::ContextScope::ContextScope(CudaBackend& b, int device, const char* what) {
  int& current = thread_current_device();
  if (current == device) [[likely]] {
    b.slot(device, what);  // still validate the index and availability
    return;
  }
  CUcontext target = b.context(device, what);
  const EntryPoints& t = api(what);
  if (current >= 0) {
    previous_ = b.context(current, what);
  } else {
    check(t.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent");
  }
  if (previous_ == target) {
    current = device;  // learnt for free
    return;
  }
  check(t.cuCtxSetCurrent(target), "cuCtxSetCurrent");
  previous_device_ = current;
  current = device;
  switched_ = true;
}

CudaBackend::ContextScope::~ContextScope() {
  if (!switched_) return;
  // Restoring can only fail if the driver is torn down; nothing useful to report then.
  driver().api.cuCtxSetCurrent(previous_);
  thread_current_device() = previous_device_;
}

// ---- devices ----

void CudaBackend::set_current_device(int device) {
  int& current = thread_current_device();
  if (current == device) [[likely]] return;
  CUcontext c = context(device, "set_current_device");
  check(api("set_current_device").cuCtxSetCurrent(c), "cuCtxSetCurrent");
  current = device;
}

int CudaBackend::current_device() {
  int current = thread_current_device();
  if (current >= 0) [[likely]] return current;
  // Unknown (never set through cudakit on this thread): ask the driver, since another library
  // may have made a context current. No context current: device 0, as in the CUDA runtime.
  if (!driver().available) return 0;
  CUcontext c = nullptr;
  int ordinal = device_of_current_context(&c);
  if (ordinal >= 0) return ordinal;
  if (!c) {
    // No context on this thread: bind device 0's primary context now, as the CUDA runtime
    // does on a thread's first call. Later queries are then a thread_local read (~1 ns)
    // instead of two driver calls each.
    set_current_device(0);
    return 0;
  }
  return 0;  // a foreign (non-primary) context is current: report device 0, cache nothing
}

DeviceInfo CudaBackend::device_info(int device) {
  DeviceSlot& d = slot(device, "device_info");
  std::call_once(d.info_once, [&] {
    const EntryPoints& t = api("device_info");
    DeviceInfo info;
    char name[256] = {};
    check(t.cuDeviceGetName(name, sizeof(name) - 1, d.dev), "cuDeviceGetName");
    info.name = name;
    check(t.cuDeviceTotalMem(&info.total_memory, d.dev), "cuDeviceTotalMem");
    CUuuid uuid{};
    check(t.cuDeviceGetUuid(&uuid, d.dev), "cuDeviceGetUuid");
    unsigned char raw[16];
    static_assert(sizeof(uuid.bytes) == sizeof(raw));
    std::memcpy(raw, uuid.bytes, sizeof(raw));
    info.uuid = uuid_string(raw);
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      check(t.cuDeviceGetAttribute(&v, a, d.dev), "cuDeviceGetAttribute");
      return v;
    };
    info.major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    info.minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    info.multi_processor_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    info.L2_cache_size = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    info.max_threads_per_multi_processor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    info.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    info.warp_size = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    info.regs_per_multiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    info.shared_memory_per_block =
        static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
    info.shared_memory_per_block_optin =
        static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
    info.shared_memory_per_multiprocessor =
        static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
    info.clock_rate = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    info.memory_clock_rate = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    info.memory_bus_width = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    info.is_integrated = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED) != 0;
    info.is_multi_gpu_board = attr(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD) != 0;
    info.pci_bus_id = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
    info.pci_device_id = attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
    info.pci_domain_id = attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
    d.info = std::move(info);
  });
  return d.info;
}

MemInfo CudaBackend::mem_get_info(int device) {
  ContextScope scope(*this, device, "mem_get_info");
  MemInfo m;
  check(api("mem_get_info").cuMemGetInfo(&m.free, &m.total), "cuMemGetInfo");
  return m;
}

void CudaBackend::device_synchronize(int device) {
  ContextScope scope(*this, device, "device_synchronize");
  check(api("device_synchronize").cuCtxSynchronize(), "cuCtxSynchronize");
}

bool CudaBackend::can_access_peer(int device, int peer) {
  CUdevice d = cu_device(device, "can_access_peer");
  CUdevice p = cu_device(peer, "can_access_peer");
  if (device == peer) return false;  // as cuDeviceCanAccessPeer: a device is not its own peer
  int can = 0;
  check(api("can_access_peer").cuDeviceCanAccessPeer(&can, d, p), "cuDeviceCanAccessPeer");
  return can != 0;
}

bool CudaBackend::peer_mappable(const void* ptr) noexcept {
  if (!ptr) return false;
  const DriverState& s = driver();
  if (!s.available) return false;
  // cudaIpcGetMemHandle-capable means a cuMemAlloc allocation: exactly the memory that
  // cuCtxEnablePeerAccess maps on the peer.
  int legacy = 0;
  try {
    CUresult rc = with_context_retry("peer_mappable", [&] {
      return s.api.cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                         reinterpret_cast<CUdeviceptr>(ptr));
    });
    return rc == CUDA_SUCCESS && legacy != 0;
  } catch (...) {  // no context could be made current: cannot tell
    return false;
  }
}

void CudaBackend::enable_peer_access(int device, int peer) {
  if (device == peer) {
    cu_device(device, "enable_peer_access");
    return;  // a device always reaches its own memory
  }
  CUcontext peer_ctx = context(peer, "enable_peer_access");
  ContextScope scope(*this, device, "enable_peer_access");
  CUresult rc = api("enable_peer_access").cuCtxEnablePeerAccess(peer_ctx, 0);
  if (rc == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return;  // idempotent by contract
  check(rc, "cuCtxEnablePeerAccess");
}

std::pair<int, int> CudaBackend::stream_priority_range() {
  ensure_current_context("stream_priority_range");
  int least = 0, greatest = 0;
  check(api("stream_priority_range").cuCtxGetStreamPriorityRange(&least, &greatest),
        "cuCtxGetStreamPriorityRange");
  return {least, greatest};
}

}  // namespace cudakit::detail::cuda
