// CudaBackend: device / pinned / stream-ordered allocation, virtual memory, copies.
//
// Allocation calls return nullptr / 0 on CUDA_ERROR_OUT_OF_MEMORY (the caching allocator frees
// cached blocks and retries before it reports); every other failure throws.
// Release calls are silent no-ops once the process is exiting (no driver calls at exit).
#include <fcntl.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_backend.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
void* hptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
CUstream cu(StreamHandle s) { return static_cast<CUstream>(s); }

// Teardown can race with the driver's own shutdown; a release then has nothing left to do.
bool ignorable_at_release(CUresult rc) { return rc == CUDA_ERROR_DEINITIALIZED; }

CUmemAllocationProp pinned_on(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

void* CudaBackend::mem_alloc(int device, std::size_t bytes) {
  ContextScope scope(*this, device, "mem_alloc");
  CUdeviceptr p = 0;
  CUresult rc = api("mem_alloc").cuMemAlloc(&p, bytes);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
  check(rc, "cuMemAlloc");
  return hptr(p);
}

void CudaBackend::mem_free(int device, void* ptr) {
  if (!ptr || is_shutting_down()) return;
  ContextScope scope(*this, device, "mem_free");
  CUresult rc = api("mem_free").cuMemFree(dptr(ptr));
  if (!ignorable_at_release(rc)) check(rc, "cuMemFree");
}

void* CudaBackend::host_alloc_pinned(std::size_t bytes) {
  ensure_current_context("host_alloc_pinned");
  void* p = nullptr;
  // Portable: usable by every context (device), not only the one current here.
  CUresult rc = api("host_alloc_pinned").cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
  check(rc, "cuMemHostAlloc");
  return p;
}

void CudaBackend::host_free_pinned(void* ptr) {
  if (!ptr || is_shutting_down()) return;
  const EntryPoints& t = api("host_free_pinned");
  CUresult rc = with_context_retry("host_free_pinned", [&] { return t.cuMemFreeHost(ptr); });
  if (!ignorable_at_release(rc)) check(rc, "cuMemFreeHost");
}

bool CudaBackend::host_register(void* ptr, std::size_t bytes) {
  ensure_current_context("host_register");
  const EntryPoints& t = api("host_register");
  CUresult rc = CUDAKIT_CU_OPTIONAL(t, cuMemHostRegister)(ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return false;
  check(rc, "cuMemHostRegister");
  return true;
}

void CudaBackend::host_unregister(void* ptr) {
  if (!ptr || is_shutting_down()) return;
  const EntryPoints& t = api("host_unregister");
  auto fn = CUDAKIT_CU_OPTIONAL(t, cuMemHostUnregister);
  CUresult rc = with_context_retry("host_unregister", [&] { return fn(ptr); });
  if (!ignorable_at_release(rc)) check(rc, "cuMemHostUnregister");
}

void* CudaBackend::mem_alloc_async(int device, std::size_t bytes, StreamHandle s) {
  ContextScope scope(*this, device, "mem_alloc_async");
  const EntryPoints& t = api("mem_alloc_async");
  CUdeviceptr p = 0;
  CUresult rc = CUDAKIT_CU_OPTIONAL(t, cuMemAllocAsync)(&p, bytes, cu(s));
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
  check(rc, "cuMemAllocAsync");
  return hptr(p);
}

void CudaBackend::mem_free_async(void* ptr, StreamHandle s) {
  if (!ptr || is_shutting_down()) return;
  ensure_context(s, "mem_free_async");
  const EntryPoints& t = api("mem_free_async");
  CUresult rc = CUDAKIT_CU_OPTIONAL(t, cuMemFreeAsync)(dptr(ptr), cu(s));
  if (!ignorable_at_release(rc)) check(rc, "cuMemFreeAsync");
}

// ---- virtual memory ----

std::size_t CudaBackend::vm_granularity(int device) {
  cu_device(device, "vm_granularity");
  const EntryPoints& t = api("vm_granularity");
  CUmemAllocationProp prop = pinned_on(device);
  std::size_t g = 0;
  check(CUDAKIT_CU_OPTIONAL(t, cuMemGetAllocationGranularity)(&g, &prop,
                                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity");
  return g;
}

std::uintptr_t CudaBackend::vm_reserve(int device, std::size_t bytes) {
  ContextScope scope(*this, device, "vm_reserve");
  const EntryPoints& t = api("vm_reserve");
  CUdeviceptr va = 0;
  CUresult rc = CUDAKIT_CU_OPTIONAL(t, cuMemAddressReserve)(&va, bytes, 0, 0, 0);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return 0;  // address space exhausted
  check(rc, "cuMemAddressReserve");
  return static_cast<std::uintptr_t>(va);
}

void CudaBackend::vm_release(std::uintptr_t va, std::size_t bytes) {
  if (!va || is_shutting_down()) return;
  const EntryPoints& t = api("vm_release");
  auto fn = CUDAKIT_CU_OPTIONAL(t, cuMemAddressFree);
  CUresult rc =
      with_context_retry("vm_release", [&] { return fn(static_cast<CUdeviceptr>(va), bytes); });
  if (!ignorable_at_release(rc)) check(rc, "cuMemAddressFree");
}

// Physical chunks ask for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR so that expandable
// segments can be shared with other processes (vm_export_fd), as torch >= 2.5 does. A driver
// or device that refuses the handle type (the device attribute says so, or cuMemCreate fails
// with it and succeeds without it) gets unshareable chunks from then on: allocation never
// fails for want of sharing; vm_export_fd reports the refusal instead.
PhysMemHandle CudaBackend::vm_create(int device, std::size_t bytes) {
  ContextScope scope(*this, device, "vm_create");
  const EntryPoints& t = api("vm_create");
  auto create = CUDAKIT_CU_OPTIONAL(t, cuMemCreate);
  DeviceSlot& d = slot(device, "vm_create");
  static_assert(sizeof(PhysMemHandle) == sizeof(CUmemGenericAllocationHandle));
  auto refuse = [&](const std::string& why) {
    d.vm_fd_share.store(2, std::memory_order_release);
    std::lock_guard lock(vm_share_mu_);
    if (vm_share_refusal_.empty())
      vm_share_refusal_ = "device " + std::to_string(device) + ": " + why;
  };
  int share = d.vm_fd_share.load(std::memory_order_acquire);
  if (share == 0) {
    int supported = 0;
    const CUresult a = t.cuDeviceGetAttribute(
        &supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, d.dev);
    if (!t.cuMemExportToShareableHandle || !t.cuMemImportFromShareableHandle) {
      refuse("the driver lacks cuMemExportToShareableHandle / cuMemImportFromShareableHandle");
      share = 2;
    } else if (a != CUDA_SUCCESS || supported == 0) {
      refuse("the device does not support POSIX file descriptor handles for cuMemCreate "
             "memory (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0)");
      share = 2;
    }
  }
  CUmemAllocationProp prop = pinned_on(device);
  CUmemGenericAllocationHandle h = 0;
  if (share != 2) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    const CUresult rc = create(&h, bytes, &prop, 0);
    if (rc == CUDA_SUCCESS) {
      if (share == 0) d.vm_fd_share.store(1, std::memory_order_release);
      return static_cast<PhysMemHandle>(h);
    }
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) return 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    const CUresult plain = create(&h, bytes, &prop, 0);
    if (plain == CUDA_ERROR_OUT_OF_MEMORY) return 0;
    check(plain, "cuMemCreate");
    const char* name = nullptr;
    if (t.cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name) name = "an unknown error";
    refuse(std::string("cuMemCreate refused CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (") + name +
           ") and succeeded without it");
    return static_cast<PhysMemHandle>(h);
  }
  CUresult rc = create(&h, bytes, &prop, 0);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return 0;
  check(rc, "cuMemCreate");
  return static_cast<PhysMemHandle>(h);
}

int CudaBackend::vm_export_fd(PhysMemHandle h) {
  const EntryPoints& t = api("vm_export_fd");
  auto fn = CUDAKIT_CU_OPTIONAL(t, cuMemExportToShareableHandle);
  int fd = -1;
  const CUresult rc = with_context_retry("vm_export_fd", [&] {
    return fn(&fd, static_cast<CUmemGenericAllocationHandle>(h),
              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  });
  if (rc != CUDA_SUCCESS) {
    std::string refusal;
    {
      std::lock_guard lock(vm_share_mu_);
      refusal = vm_share_refusal_;
    }
    if (!refusal.empty())
      throw NotSupportedError(
          "IPC export of memory in an expandable segment needs physical memory shareable as a "
          "POSIX file descriptor, and the driver refused it (" + refusal + "): set "
          "CUDAKIT_ALLOC_CONF=expandable_segments:False in the exporting process");
    throw_cu(rc, "cuMemExportToShareableHandle");
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // the driver's descriptor must not leak into exec'd children
  return fd;
}

PhysMemHandle CudaBackend::vm_import_fd(int device, int fd, std::size_t bytes) {
  (void)bytes;  // the driver knows the size; a wrong one makes vm_map fail
  ContextScope scope(*this, device, "vm_import_fd");
  const EntryPoints& t = api("vm_import_fd");
  CUmemGenericAllocationHandle h = 0;
  // The POSIX descriptor travels in the pointer-sized argument (driver API reference).
  check(CUDAKIT_CU_OPTIONAL(t, cuMemImportFromShareableHandle)(
            &h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle");
  return static_cast<PhysMemHandle>(h);
}

void CudaBackend::vm_destroy(PhysMemHandle h) {
  if (!h || is_shutting_down()) return;
  const EntryPoints& t = api("vm_destroy");
  auto fn = CUDAKIT_CU_OPTIONAL(t, cuMemRelease);
  CUresult rc = with_context_retry(
      "vm_destroy", [&] { return fn(static_cast<CUmemGenericAllocationHandle>(h)); });
  if (!ignorable_at_release(rc)) check(rc, "cuMemRelease");
}

void CudaBackend::vm_map(std::uintptr_t va, std::size_t bytes, PhysMemHandle h, int device) {
  ContextScope scope(*this, device, "vm_map");
  const EntryPoints& t = api("vm_map");
  auto ptr = static_cast<CUdeviceptr>(va);
  check(CUDAKIT_CU_OPTIONAL(t, cuMemMap)(ptr, bytes, 0, static_cast<CUmemGenericAllocationHandle>(h), 0),
        "cuMemMap");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUresult rc = CUDAKIT_CU_OPTIONAL(t, cuMemSetAccess)(ptr, bytes, &access, 1);
  if (rc != CUDA_SUCCESS) {
    t.cuMemUnmap(ptr, bytes);  // leave no half-usable mapping behind
    throw_cu(rc, "cuMemSetAccess");
  }
}

void CudaBackend::vm_map_chunks(std::uintptr_t va, const std::size_t* sizes,
                                const PhysMemHandle* h, std::size_t n, int device) {
  if (n == 0) return;
  ContextScope scope(*this, device, "vm_map");
  const EntryPoints& t = api("vm_map");
  auto map = CUDAKIT_CU_OPTIONAL(t, cuMemMap);
  std::size_t i = 0;
  std::uintptr_t at = va;  // start of chunk i
  auto undo = [&] {
    while (i-- > 0) {
      at -= sizes[i];
      t.cuMemUnmap(static_cast<CUdeviceptr>(at), sizes[i]);
    }
  };
  for (; i < n; at += sizes[i], ++i) {
    CUresult rc = map(static_cast<CUdeviceptr>(at), sizes[i], 0,
                      static_cast<CUmemGenericAllocationHandle>(h[i]), 0);
    if (rc != CUDA_SUCCESS) {
      undo();
      throw_cu(rc, "cuMemMap");
    }
  }
  // One access change for the whole range (it spans the n mappings just made).
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUresult rc = CUDAKIT_CU_OPTIONAL(t, cuMemSetAccess)(static_cast<CUdeviceptr>(va), at - va,
                                                        &access, 1);
  if (rc != CUDA_SUCCESS) {
    undo();
    throw_cu(rc, "cuMemSetAccess");
  }
}

void CudaBackend::vm_unmap(std::uintptr_t va, std::size_t bytes) {
  if (!va || is_shutting_down()) return;
  const EntryPoints& t = api("vm_unmap");
  auto fn = CUDAKIT_CU_OPTIONAL(t, cuMemUnmap);
  CUresult rc =
      with_context_retry("vm_unmap", [&] { return fn(static_cast<CUdeviceptr>(va), bytes); });
  if (!ignorable_at_release(rc)) check(rc, "cuMemUnmap");
}

int CudaBackend::pointer_device(const void* ptr) {
  if (!ptr) return -1;
  const EntryPoints& t = api("pointer_device");
  // No context is needed for pointer queries (unified addressing); do not create one.
  unsigned int type = 0;
  CUresult rc = with_context_retry("pointer_device", [&] {
    return t.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(ptr));
  });
  if (rc == CUDA_ERROR_INVALID_VALUE) return -1;  // memory the driver does not know: host
  check(rc, "cuPointerGetAttribute(MEMORY_TYPE)");
  if (type == CU_MEMORYTYPE_HOST) return -1;
  int ordinal = -1;
  rc = t.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr(ptr));
  if (rc == CUDA_ERROR_INVALID_VALUE) return -1;
  check(rc, "cuPointerGetAttribute(DEVICE_ORDINAL)");
  return ordinal;
}

// ---- copies ----

void CudaBackend::memcpy_async(void* dst, const void* src, std::size_t bytes, StreamHandle s) {
  if (bytes == 0) return;
  ensure_context(s, "memcpy_async");
  check(api("memcpy_async").cuMemcpyAsync(dptr(dst), dptr(src), bytes, cu(s)), "cuMemcpyAsync");
}

void CudaBackend::memset_d8_async(void* dst, unsigned char value, std::size_t bytes,
                                  StreamHandle s) {
  if (bytes == 0) return;
  ensure_context(s, "memset_d8_async");
  check(api("memset_d8_async").cuMemsetD8Async(dptr(dst), value, bytes, cu(s)),
        "cuMemsetD8Async");
}

}  // namespace cudakit::detail::cuda
