// Device memory management (seed: "Memory management" of torch.cuda): the caching
// allocator's statistics and controls, raw caching_allocator_alloc/delete, per-process
// memory fraction, IPC sharing, and memory pools.
//
// Every function taking `device` accepts kCurrentDevice. Functions are thread-safe.
// The allocator itself is documented in src/memory/device_allocator.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cudakit/device.hpp"
#include "cudakit/export.hpp"
#include "cudakit/stream.hpp"

namespace CUDAKIT_API cudakit {

// ---- statistics (torch's DeviceStats) ----
struct MemoryStat {
  std::int64_t current = 0, peak = 0, allocated = 0, freed = 0;
};
enum class StatPool { all = 0, small_pool = 1, large_pool = 2 };
inline constexpr int kNumStatPools = 3;
inline constexpr const char* kStatPoolNames[kNumStatPools] = {"all", "small_pool", "large_pool"};

// Who an allocation was made for: the per-framework breakdown of memory_stats() ("framework.
// <name>.allocated_bytes.current", ...). Allocations through cudakit's own API are `cudakit`;
// those through the torch plug-in (libcudakit_alloc.so / use_with_torch) are `torch`, those
// through cudakit.memory.cupy_allocator() are `cupy`. A one-byte tag on the block: the
// statistics stay exact (peak included) for each framework.
enum class MemoryClient : std::uint8_t { cudakit = 0, torch = 1, cupy = 2 };
inline constexpr int kNumMemoryClients = 3;
inline constexpr const char* kMemoryClientNames[kNumMemoryClients] = {"cudakit", "torch", "cupy"};
// Statistics of one framework's allocations (same semantics as MemoryStats' fields).
struct ClientMemoryStats {
  MemoryStat allocation;       // live allocations (count)
  MemoryStat allocated_bytes;  // bytes handed out (rounded)
  MemoryStat requested_bytes;  // bytes asked for
};

struct MemoryStats {
  MemoryStat allocation[kNumStatPools];          // live allocations (count)
  MemoryStat segment[kNumStatPools];             // device allocations (count)
  MemoryStat active[kNumStatPools];              // live or awaiting stream events (count)
  MemoryStat inactive_split[kNumStatPools];      // free pieces of split segments (count)
  MemoryStat allocated_bytes[kNumStatPools];     // bytes handed out (rounded)
  MemoryStat reserved_bytes[kNumStatPools];      // bytes obtained from the device
  MemoryStat active_bytes[kNumStatPools];
  MemoryStat inactive_split_bytes[kNumStatPools];
  MemoryStat requested_bytes[kNumStatPools];     // bytes asked for (unrounded)
  std::int64_t num_alloc_retries = 0;   // device allocation failed, cache flushed, retried
  std::int64_t num_ooms = 0;            // OutOfMemoryError raised
  std::int64_t num_sync_all_streams = 0;
  std::int64_t num_device_alloc = 0;    // calls to the device allocation API
  std::int64_t num_device_free = 0;
  std::int64_t max_split_size = 0;      // -1 when unlimited (torch: SIZE_MAX → -1)
  MemoryStat oversize_allocations;      // allocations > max_split_size
  MemoryStat oversize_segments;
  ClientMemoryStats by_client[kNumMemoryClients];  // indexed by MemoryClient
  // Tagged (sleep) pools of the device, all tags together (memory_stats' "sleep.*" keys):
  // bytes of their segments awake or asleep, of those asleep (released; not in
  // reserved_bytes), of pinned host memory holding offloaded contents, and sleep / wake_up
  // calls that changed a pool.
  struct {
    std::int64_t pool_bytes = 0, asleep_bytes = 0, offloaded_bytes = 0;
    std::int64_t num_sleeps = 0, num_wake_ups = 0;
  } sleep;
};

// Typed statistics of `device`'s caching allocator.
MemoryStats memory_stats_of(int device = kCurrentDevice);
// torch.cuda.memory_stats(): flat keys ("allocated_bytes.all.current", "num_ooms", ...),
// sorted as torch's OrderedDict, plus cudakit's per-framework breakdown
// "framework.{cudakit,torch,cupy}.{allocation,allocated_bytes,requested_bytes}.{current,peak,
// allocated,freed}" (torch has no such keys; its tools ignore them).
std::map<std::string, std::int64_t> memory_stats(int device = kCurrentDevice);
// memory_stats()' keys in its order, each with where its counter lies in MemoryStats: callers
// that convert the statistics often (the Python binding) read memory_stats_of() through this
// table instead of building ~160 strings per call.
struct MemoryStatField {
  std::string key;
  std::size_t offset;  // of a std::int64_t inside MemoryStats
  std::int64_t value(const MemoryStats& s) const noexcept {
    return *reinterpret_cast<const std::int64_t*>(reinterpret_cast<const char*>(&s) + offset);
  }
};
const std::vector<MemoryStatField>& memory_stat_fields();

std::size_t memory_allocated(int device = kCurrentDevice);      // O(1)
std::size_t max_memory_allocated(int device = kCurrentDevice);
std::size_t memory_reserved(int device = kCurrentDevice);
std::size_t max_memory_reserved(int device = kCurrentDevice);
inline std::size_t memory_cached(int device = kCurrentDevice) { return memory_reserved(device); }
inline std::size_t max_memory_cached(int device = kCurrentDevice) {
  return max_memory_reserved(device);
}
void reset_peak_memory_stats(int device = kCurrentDevice);
void reset_accumulated_memory_stats(int device = kCurrentDevice);
void reset_max_memory_allocated(int device = kCurrentDevice);  // = reset_peak_memory_stats
void reset_max_memory_cached(int device = kCurrentDevice);     // = reset_peak_memory_stats
// Human-readable table of the statistics (torch's memory_summary layout).
std::string memory_summary(int device = kCurrentDevice, bool abbreviated = false);

// ---- controls ----
// Returns every unused cached block (all devices that have an allocator) to the device.
void empty_cache();
// Caps this process's reserved memory on `device` at fraction * total. fraction in [0, 1].
void set_per_process_memory_fraction(double fraction, int device = kCurrentDevice);
double get_per_process_memory_fraction(int device = kCurrentDevice);
// "native" or "cudaMallocAsync" (CUDAKIT_ALLOC_CONF=backend:...).
std::string get_allocator_backend();
// Replaces the allocator settings at run time (torch.cuda.memory._set_allocator_settings):
// takes effect for allocators created afterwards and for keys that are read per call.
// As torch's parser, max_split_size_mb, roundup_power2_divisions and
// garbage_collection_threshold go back to their defaults unless `conf` sets them.
void set_allocator_settings(const std::string& conf);

// Raw memory from the caching allocator (torch.cuda.caching_allocator_alloc/delete).
// `stream` defaults to the current stream of `device`.
void* caching_allocator_alloc(std::size_t bytes, int device = kCurrentDevice,
                              std::optional<StreamRef> stream = std::nullopt);
void caching_allocator_delete(void* ptr);
// Call before destroying a stream that cudakit did not create (your own cudaStream_t, one of
// another framework) if memory was allocated on it: the allocator then stops asking the
// driver about the handle (asking about a destroyed stream is undefined; driver 580 crashed)
// and waits for the work queued on it so far through an event instead. cudakit's Stream does
// this itself. A stream that allocated nothing is ignored. Never throws.
void stream_retiring(StreamRef stream) noexcept;
// caching_allocator_alloc on behalf of another framework: the same memory, counted under
// `client` in memory_stats()' "framework.*" breakdown (cudakit.memory.cupy_allocator uses it).
// Free with caching_allocator_delete.
void* caching_allocator_alloc_for(MemoryClient client, std::size_t bytes,
                                  int device = kCurrentDevice,
                                  std::optional<StreamRef> stream = std::nullopt);
// While disabled, allocations go straight to the device (and frees straight back).
void caching_allocator_enable(bool enabled = true);
bool caching_allocator_enabled() noexcept;
// RAII: disables the caching allocator in its scope (torch.cuda.caching_allocator_disabled).
class CachingAllocatorDisabled {
 public:
  CachingAllocatorDisabled() : prev_(caching_allocator_enabled()) { caching_allocator_enable(false); }
  ~CachingAllocatorDisabled() { caching_allocator_enable(prev_); }
  CachingAllocatorDisabled(const CachingAllocatorDisabled&) = delete;
  CachingAllocatorDisabled& operator=(const CachingAllocatorDisabled&) = delete;

 private:
  bool prev_;
};

// The device owning a caching-allocator pointer, its block size and allocation stream.
struct AllocationInfo {
  int device = -1;
  std::size_t size = 0;       // block size (rounded)
  std::size_t requested = 0;  // bytes asked for
  StreamRef stream = StreamRef::default_for(-1);
};
std::optional<AllocationInfo> allocation_info(const void* ptr);

// ---- device-wide information ----
struct GpuProcess {
  int pid = 0;
  std::size_t used_bytes = 0;
};
std::vector<GpuProcess> gpu_processes(int device = kCurrentDevice);
// torch.cuda.list_gpu_processes(): a readable listing.
std::string list_gpu_processes(int device = kCurrentDevice);

// ---- IPC ----
struct IpcMemHandle {
  unsigned char bytes[64] = {};
  int device = -1;
  std::size_t offset = 0;  // offset of the allocation in the exported segment
  std::size_t size = 0;    // bytes of the allocation
  // Memory of an expandable segment (expandable_segments:True): the table of its physical
  // chunks (one file descriptor of the exporting process each, which the importer fetches
  // with pidfd_getfd); `bytes` then holds the table's header (exporter's pid, chunk size,
  // count) and `offset` is the allocation's offset in its first chunk. Empty for memory of
  // ordinary segments. Send `bytes` followed by `chunks` (Python: one bytes object).
  std::vector<unsigned char> chunks;
};
// Exports a caching-allocator allocation for another process. The allocation must stay
// alive (not freed) until every importer has opened the handle; the importer's mapping stays
// valid afterwards. Memory of expandable segments: NotSupportedError when the backend cannot
// share its physical memory (cuda: the driver refused shareable allocations).
IpcMemHandle ipc_export(void* ptr);
// Opens a handle from another process; close with ipc_close (or it is closed by
// ipc_collect once no longer referenced). Returns the allocation's address. Importing the
// same handle again returns the same address; each import is closed by its own ipc_close.
// Expandable-segment handles need Linux >= 5.6 (pidfd_getfd) and ptrace access to the
// exporting process (PermissionError / IoError EPERM otherwise, naming the fix); a handle
// whose memory the exporter has released meanwhile, or whose process has exited, gives an
// Error / IoError saying so.
void* ipc_import(const IpcMemHandle& handle);
void ipc_close(void* ptr);
// Releases imported segments that are no longer used (torch.cuda.ipc_collect).
void ipc_collect();

}  // namespace cudakit

namespace CUDAKIT_API cudakit {

// ---- pinned host allocator statistics (torch.cuda.host_memory_stats) ----
// Keys: "allocations|allocated_bytes|segment|reserved_bytes|active_requests|active_bytes"
// + ".{current,peak,allocated,freed}", "num_host_alloc", "num_host_free",
// "host_alloc_time.{total,max,min,count,avg}", "host_free_time.{...}" (microseconds).
std::map<std::string, std::int64_t> host_memory_stats();
void reset_accumulated_host_memory_stats();
void reset_peak_host_memory_stats();
// Returns cached pinned blocks to the system.
void host_empty_cache();

// ---- memory pools ----
using MempoolId = std::pair<std::uint64_t, std::uint64_t>;

// A private pool of the caching allocator (torch.cuda.MemPool). Allocations routed to it
// (use_mem_pool, graph capture) never share segments with the default pool. Segments are
// returned when the pool is destroyed and no allocation from it is alive.
// Thread-safety: methods are thread-safe; a pool object is owned by one thread.
class PluggableAllocator;

class MemPool {
 public:
  explicit MemPool(bool use_on_oom = false, bool no_split = false, int device = kCurrentDevice);
  // Segments of this pool come from `allocator` (torch's MemPool(allocator=...)), e.g. a
  // registration-friendly allocator for communication buffers.
  MemPool(const PluggableAllocator& allocator, bool use_on_oom = false,
          bool no_split = false, int device = kCurrentDevice);
  // Shares an existing pool (e.g. graph_pool_handle()).
  MemPool(MempoolId id, int device);
  ~MemPool();
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;
  MempoolId id() const noexcept { return id_; }
  int device() const noexcept { return device_; }
  int use_count() const;

 private:
  MempoolId id_;
  int device_;
};

// A fresh pool id (torch.cuda.graph_pool_handle): a pool created on first use.
MempoolId graph_pool_handle();

// RAII: allocations of the calling thread on `device` go to `pool` (torch.cuda.use_mem_pool).
class UseMemPool {
 public:
  explicit UseMemPool(const MemPool& pool, int device = kCurrentDevice);
  ~UseMemPool();
  UseMemPool(const UseMemPool&) = delete;
  UseMemPool& operator=(const UseMemPool&) = delete;

 private:
  MempoolId id_;
  int device_;
};

// General routing (used by graph capture): until end_allocate_to_pool, allocations on
// `device` whose stream passes `filter` go to pool `id` (created if needed).
void begin_allocate_to_pool(int device, MempoolId id,
                            std::function<bool(NativeStream)> filter);
void end_allocate_to_pool(int device, MempoolId id);
void release_pool(int device, MempoolId id);

// ---- a private pool's allocation state (torch's checkPoolLiveAllocations,
// getCheckpointState / setCheckpointPoolState: CUDA graph trees, torch.compile's
// mode="reduce-overhead") ----
// Addresses of the blocks of pool `id` on `device` that are allocated now (not those freed
// and awaiting record_stream events). ValueError when the pool does not exist.
std::vector<std::uintptr_t> pool_live_allocations(MempoolId id, int device = kCurrentDevice);
struct PoolBlockState {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  bool allocated = false;
  std::size_t requested = 0;  // allocated blocks: the size asked for
  int client = 0;             // allocated blocks: the MemoryClient they count for
};
struct PoolSegmentState {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::vector<PoolBlockState> blocks;  // in address order, covering the segment
};
struct PoolState {
  int device = 0;
  MempoolId pool{0, 0};
  std::vector<PoolSegmentState> segments;
};
// The block layout of every segment of pool `id` (which blocks are allocated and which free).
PoolState get_pool_state(MempoolId id, int device = kCurrentDevice);
// Puts the pool back into `state`: every block allocated in the pool now is freed, then each
// segment of `state` is laid out again as recorded, its recorded-allocated blocks allocated
// (they are live again: free them with caching_allocator_delete or the torch hook). Segments
// the pool gained since stay, free. The blocks freed and those allocated (in address order)
// come back. ValueError, with nothing changed, when a segment of `state` is no longer the
// pool's or a block of the pool still awaits record_stream events.
struct PoolStateDelta {
  std::vector<std::uintptr_t> freed, allocated;
};
PoolStateDelta set_pool_state(const PoolState& state);

// ---- pluggable allocators ----
// torch.cuda.memory.CUDAPluggableAllocator: loads `path` and resolves the two functions.
class PluggableAllocator {
 public:
  PluggableAllocator(const std::string& path, const std::string& alloc_fn_name,
                     const std::string& free_fn_name);
  // The same C ABI from functions already in the process (ssize_t == std::ptrdiff_t).
  using AllocFn = void* (*)(std::ptrdiff_t size, int device, void* stream);
  using FreeFn = void (*)(void* ptr, std::ptrdiff_t size, int device, void* stream);
  PluggableAllocator(AllocFn alloc_fn, FreeFn free_fn, const std::string& name = "in-process");
  std::shared_ptr<void> impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<void> impl_;
};
// Routes every later device allocation to `allocator` (torch.cuda.change_current_allocator).
// Memory allocated before keeps being freed by its own allocator.
void change_current_allocator(const PluggableAllocator& allocator);
// Back to the built-in caching allocator.
void reset_current_allocator();

}  // namespace cudakit

namespace CUDAKIT_API cudakit {
// ---- sleep and wake of tagged memory (vLLM's sleep mode / SGLang's memory saver) ----
// A tagged pool is a private pool of the caching allocator (one per tag and device) whose
// segments are virtual-memory reservations backed by physical chunks (the seam's vm_* calls,
// with expandable segments on or off). sleep() releases the physical memory and keeps the
// addresses reserved; wake_up() maps new memory at the same addresses, so pointers, tensors
// and CUDA graphs captured on them stay valid. src/memory/sleep_pool.hpp has the design.
//
// Thread-safety: every function is thread-safe. sleep / wake_up / sleep_state calls are
// serialised with each other (process-wide); allocations and frees on other threads run
// concurrently: an allocation from a pool that is asleep (or going to sleep / waking) raises,
// a free is allowed at any time. sleep and wake_up wait for the device: call them without
// holding locks that stream work or finalisers need.

// RAII: allocations of the calling thread on `device` (cudakit's, and torch's / CuPy's
// through the plug-ins) come from the pool of `tag`, created on first use. Nests with
// UseMemPool and graph capture: the innermost scope wins. Throws ValueError for an empty
// tag, NotSupportedError with backend:cudaMallocAsync (the driver's pool has no tags).
class UseSleepPool {
 public:
  explicit UseSleepPool(const std::string& tag, int device = kCurrentDevice);
  ~UseSleepPool();
  UseSleepPool(const UseSleepPool&) = delete;
  UseSleepPool& operator=(const UseSleepPool&) = delete;

 private:
  MempoolId id_;
  int device_;
};

// Releases the physical memory of the pools of `tags` (nullopt: every tag) on every device;
// returns the bytes of device memory released. Pools whose tag is in `offload` first copy
// their allocated blocks to pinned host memory (cudakit's host cache, stream-ordered on
// each device's current stream); the others are discarded. Waits for the device first (work
// on any stream may still use the memory). Addresses stay reserved. A pool already asleep is
// left as it is (0 bytes). Throws KeyError for an unknown tag, ValueError for an offload tag
// that is not being put to sleep; on an error the pool that failed stays awake and intact.
std::size_t sleep(const std::optional<std::vector<std::string>>& tags = std::nullopt,
                  const std::vector<std::string>& offload = {});
// Maps memory again at the same addresses and copies offloaded contents back (discarded
// contents are undefined). The copies are stream-ordered on the device's current stream and
// wake_up returns once they are done (as vLLM's), so any stream may use the memory at once.
// Pools already awake are left alone. Out of device memory (after releasing the cache):
// OutOfMemoryError naming the tag, and that pool stays asleep with its contents offloaded.
void wake_up(const std::optional<std::vector<std::string>>& tags = std::nullopt);

// One tag's pools (all devices): bytes of their segments (the device memory they hold when
// awake), bytes allocated in them, whether they are asleep, and whether their contents are
// offloaded to host memory.
struct SleepPoolState {
  std::size_t bytes = 0;
  std::size_t allocated_bytes = 0;
  bool asleep = false;
  bool offloaded = false;
};
std::map<std::string, SleepPoolState> sleep_state();

// ---- weight hand-off: a whole tagged pool shared with another process ----
// export_pool: a handle to the memory of `tag`'s pool on `device` (awake): the pool's
// physical chunks as file descriptors of this process (fetched by the importer with
// pidfd_getfd, as expandable-segment IPC, ipc_export), their offsets in the pool's address
// range, and nothing else. The pool must stay awake and keep its memory (no sleep, no
// empty_cache of its free segments) until every importer has opened the handle. Throws
// KeyError for an unknown tag, Error when the pool is asleep or empty, NotSupportedError when
// the backend cannot share its chunks.
std::vector<unsigned char> export_pool(const std::string& tag, int device = kCurrentDevice);
// The exporter's view of its own pool: `base` is the address offsets are counted from (the
// same in import_pool's view), `size` the extent of the range.
struct PoolView {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  int device = -1;
};
PoolView pool_view(const std::string& tag, int device = kCurrentDevice);
// Opens a handle of export_pool (made by another process): the pool's memory mapped at the
// same offsets from a new base in this process. Close with close_pool; the mapping stays
// valid whatever the exporter does meanwhile (the memory lives while a process maps it).
// Errors as ipc_import's for expandable segments (stale handle, ptrace permission, ...).
PoolView import_pool(const std::vector<unsigned char>& handle);
void close_pool(const PoolView& view);

// ---- history and snapshots ----
// torch.cuda.memory._record_memory_history: enabled = nullopt (off), "state" or "all";
// context = "state" | "alloc" | "all" | "" (none); stacks = "python" | "cpp" | "all".
// As torch: switching history off drops the recorded trace; switching it on again, or
// changing the settings while on, keeps what was recorded unless clear_history is true.
void record_memory_history(std::optional<std::string> enabled = std::string("all"),
                           const std::string& context = "all", const std::string& stacks = "all",
                           std::size_t max_entries = SIZE_MAX, bool clear_history = false);
// The allocator state in torch's snapshot format ({"segments", "device_traces",
// "allocator_settings"}) as JSON; `pool` restricts segments to one MemPool.
std::string memory_snapshot_json(std::optional<MempoolId> pool = std::nullopt);
// Writes memory_snapshot_json(pool) to `path` (python -m cudakit.memory_viz path -o page.html
// renders it). JSON, so a .pickle / .pkl name is a ValueError (Python's _dump_snapshot writes
// pickles); IoError when the file cannot be written.
void dump_snapshot(const std::string& path, std::optional<MempoolId> pool = std::nullopt);
}  // namespace cudakit
