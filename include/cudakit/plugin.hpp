// cudakit's caching allocator behind PyTorch's pluggable-allocator interface
// (torch.cuda.memory.CUDAPluggableAllocator / torch._C._cuda_customAllocator and the hook
// setters of its allocator object). cudakit.memory.use_with_torch() hands these function
// pointers to torch; libcudakit_alloc.so exports the same functions by name for loading by
// path (src/plugin/alloc_plugin.cpp).
//
// The pointer types are torch's, exactly: torch stores each hook as a std::function built
// from `reinterpret_cast<Signature*>(address)`, so a mismatch would be undefined behaviour,
// not a compile error. Pool ids are c10::cuda::MempoolId_t (a pair of unsigned long long,
// passed by value) and the capture filter is a std::function<bool(cudaStream_t)> passed by
// value; both are therefore C++ types in a C-style table. cudaStream_t is `CUstream_st*`,
// declared here (not defined): public headers include no CUDA header.
//
// Torch's pool ids live in their own space inside cudakit (torch_pool_id): torch numbers its
// pools with its own counters, which would otherwise collide with cudakit's MemPool and
// graph pool ids in the same allocator.
//
// Failures: `malloc` throws (OutOfMemoryError, ...): torch does not check alloc_fn's result
// for null, and an exception thrown there reaches Python as a RuntimeError carrying cudakit's
// message (torch.cuda.OutOfMemoryError once set_torch_out_of_memory_type was called), before
// torch records the allocation. libcudakit_alloc.so's C function
// cudakit_malloc catches it and returns nullptr instead. Every other hook catches everything,
// prints one line to stderr and leaves the allocator's state as it was; the message of the
// last failure is kept per thread (last_plugin_error()).
//
// Thread-safety: every function in the table is thread-safe (torch calls them from any thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "cudakit/export.hpp"
#include "cudakit/memory.hpp"

struct CUstream_st;  // the driver's stream type (cudaStream_t == CUstream == CUstream_st*)

namespace CUDAKIT_API cudakit {

// c10::cuda::MempoolId_t and the stream filter torch passes to beginAllocateToPool.
using TorchMempoolId = std::pair<unsigned long long, unsigned long long>;
using TorchStreamFilter = std::function<bool(CUstream_st*)>;

// The hooks of torch's CUDAPluggableAllocator, in the order of its setters.
struct TorchAllocatorHooks {
  // alloc_fn / free_fn of torch._C._cuda_customAllocator (torch: void*(size_t, int,
  // cudaStream_t) and void(void*, size_t, int, cudaStream_t)); counted as MemoryClient::torch.
  void* (*malloc)(std::size_t size, int device, CUstream_st* stream);
  void (*free)(void* ptr, std::size_t size, int device, CUstream_st* stream);
  void (*init)(int device_count);                        // set_init_fn
  void (*reset)();                                       // set_reset_fn: empty_cache
  void (*memory_fraction)(double fraction, int device);  // set_memory_fraction_fn
  void* (*base_alloc)(void* ptr, std::size_t* size);     // set_base_alloc_fn
  void (*record_stream)(void* ptr, CUstream_st* stream);  // set_record_stream_fn
  // set_begin_allocate_to_pool / set_end_allocate_to_pool_fn / set_release_pool: CUDA graph
  // capture and torch.cuda.use_mem_pool route allocations to a private pool through these.
  void (*begin_allocate_to_pool)(int device, TorchMempoolId pool, TorchStreamFilter filter);
  void (*end_allocate_to_pool)(int device, TorchMempoolId pool);
  void (*release_pool)(int device, TorchMempoolId pool);
};

// The table (static storage: the pointers stay valid for the life of the process).
const TorchAllocatorHooks& torch_allocator_hooks() noexcept;

// The cudakit pool id that stands for torch's pool `id` (what memory_snapshot(pool) and
// snapshots' "segment_pool_id" use), and back. is_torch_pool_id tells the two spaces apart.
MempoolId torch_pool_id(TorchMempoolId id) noexcept;
TorchMempoolId torch_pool_id_of(MempoolId cudakit_id) noexcept;
bool is_torch_pool_id(MempoolId cudakit_id) noexcept;

// A private pool for torch's pool `id` on `device` with one reference, as torch's
// MemPool(use_on_oom, no_split) creates it (torch's pluggable interface has no hook for pool
// creation, so cudakit.memory's torch.cuda.MemPool replacement calls this); drop the
// reference with the table's release_pool. A second call adds a reference.
// With `source` (torch.cuda.MemPool(allocator=...)), the pool's segments come from that
// allocator instead of the device, as torch's.
void create_torch_pool(int device, TorchMempoolId id, bool use_on_oom = false,
                       bool no_split = false, const PluggableAllocator* source = nullptr);
// References to torch's pool `id` on `device` (0 when it does not exist).
int torch_pool_use_count(int device, TorchMempoolId id);

// Out of memory in the table's malloc: with `python_type` set (torch.OutOfMemoryError, as a
// PyObject*; the caller keeps it alive), malloc throws an exception torch's Python layer
// raises as that type, with cudakit's message (torch's wording first); nullptr restores
// throwing cudakit::OutOfMemoryError (what torch shows as RuntimeError).
void set_torch_out_of_memory_type(void* python_type) noexcept;
// torch.cuda.caching_allocator_enable(False) (torch._C._cuda_cudaCachingAllocator_enable):
// the table's malloc then takes each allocation straight from the device and its free gives
// it straight back, outside cudakit's pool, statistics and snapshots, as torch's uncached
// allocations are. Allocations made before keep their cached blocks. Thread-safe.
void set_torch_caching_enabled(bool enabled) noexcept;
bool torch_caching_enabled() noexcept;
// torch._C._cuda_attach_out_of_memory_observer: called (outside every allocator lock) before
// the table's malloc reports out of memory, with torch's arguments: device, bytes requested,
// bytes this process may use (the memory fraction's limit, else the device's total), bytes
// free on the device. Observers stay for the life of the process; one that throws is
// reported on stderr and the others still run.
using TorchOomObserver =
    std::function<void(int device, std::size_t requested, std::size_t allowed, std::size_t free)>;
void add_torch_oom_observer(TorchOomObserver observer);

// torch's profiler (torch.profiler.profile(profile_memory=True)) learns of allocations from
// its allocator: torch's own calls c10::reportMemoryUsageToProfiler, the pluggable interface
// does not. With a reporter set, the table's malloc and free call `report` (c10's function,
// found by its symbol in libc10) as torch's allocator does: the block's address, +size on
// allocation, -size on free (the rounded block size, as torch), the device's allocated and
// reserved bytes after the change, and the device; only while `enabled` (c10's
// memoryProfilingEnabled: a thread-local read) says the calling thread's profiler wants it.
// The device is passed as c10::Device's two bytes (type, index): trivially copyable, so it
// travels in one register. `{nullptr, nullptr}` turns reporting off.
struct TorchDeviceArg {
  std::int8_t type;   // c10::DeviceType (1 = CUDA)
  std::int8_t index;  // c10::DeviceIndex
};
struct TorchMemoryReporter {
  bool (*enabled)() = nullptr;
  void (*report)(void* ptr, std::int64_t alloc_size, std::size_t total_allocated,
                 std::size_t total_reserved, TorchDeviceArg device) = nullptr;
};
void set_torch_memory_reporter(TorchMemoryReporter reporter) noexcept;

// Whether torch has called the table's functions (init or malloc) in this process, and the
// message of the last failure of a table function on this thread ("" if none).
bool torch_hooks_used() noexcept;
std::string last_plugin_error();

}  // namespace cudakit
