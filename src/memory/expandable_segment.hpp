// Expandable ("virtual memory") segments: a reserved address range that is backed with
// physical memory on demand, so blocks in it stay contiguous and mergeable however the live
// set grows and shrinks. Built on the seam's vm_* calls (emulated too).
//
// Physical memory comes in "chunks" (one physical allocation each), a power-of-two number of
// "units" long and aligned to their own size from the segment's base (buddy-style): the unit
// is 2 MiB in the small pool and expandable_segments_chunk_pages pages in the large pool
// (default 4 = 8 MiB). The small pool maps one unit per chunk; the large pool's chunk grows
// with the pool (DeviceAllocator::chunk_for): the largest power-of-two multiple of the unit
// that is <= the pool's footprint slack (its size / expandable_segments_slack_div), at most
// expandable_segments_max_chunk_mb (default 32 MiB), so pools under 512 MiB keep 8 MiB
// chunks. Why: every chunk costs a create, a map and (later) an unmap and a destroy, and a
// chunk-per-8-MiB layout made 10-25x torch's device calls on the recorded traces; a chunk no
// bigger than the slack keeps what bigger chunks cost (a free hole smaller than a chunk cannot be unmapped) within the footprint
// budget for one hole. Many holes are not bounded by it: a chunk holding one small live block
// stays mapped whole (the driver maps a physical allocation whole, offset 0), so a 4 GiB
// block mapped in 128 MiB chunks and then reused as 4 MiB blocks, one in 32 kept, pinned all
// 4 GiB through empty_cache (review of the first version, test
// ExpandableSegmentsBigChunksPinBoundedMemory). Hence the 32 MiB cap: the traces' driver
// calls stay those of 128 MiB chunks but on varbatch_train (1425 against 995; 3888 with 8 MiB
// chunks), and one live block pins at most 32 MiB (torch's large page: 20 MiB). Natural
// alignment keeps the page table simple (a chunk's head is its unit index rounded down to
// its length) and lets a smaller chunk always fill a bigger one's place.
// Chunks of one size are interchangeable: a chunk unmapped in one place is mapped again
// somewhere else without a release + create (DeviceAllocator keeps such "spare" handles, with
// their sizes, for the allocation that asked for the pages to move).
// Chunk size, measured before (uniform chunks, five traces, replay, emulated; the footprint
// budget of 1/32): 8 MiB kept peak reserved / peak allocated <= 1.04 on all; a uniform 16 MiB
// made varlen_infer (650 MiB peak) 1.06; 20 MiB (torch's large page) 1.08: hence small pools
// keep 8 MiB.
//
// The default mode since issue 27 (config.hpp). Measured before the switch on 15 design
// traces (docs/performance.md "Issue 27"; the holdout half was only measured afterwards), and
// rejected:
//  * Chunks sized to the request (a 64 MiB request maps one 64 MiB chunk, up to 128/512 MiB):
//    device calls -10..-30 % but varlen_infer 1.044 -> 1.087, gpt2_ckpt_train 1.038 -> 1.054,
//    and one live block would pin a whole big chunk (ExpandableSegmentsBigChunksPinBoundedMemory).
//  * No page moves (expandable_segments_slack_div:1, torch's expandable behaviour): calls
//    2-5x torch's default instead of 4-64x, but varlen_infer 1.39, server_bert_threads 2.01,
//    llama_generate 1.14, unet_train 1.13.
//  * A looser budget (slack_div 20): calls -10..-40 %, ratios up to 1.068.
//  * 2 MiB chunks everywhere: server_bert_threads (4 streams) 1.17 -> 1.08 at 5x the calls.
// Known limits of the default: several streams each keep a partly used chunk and their own
// free memory (server_bert_threads, 4 streams: 1.20-1.25; pages move between idle streams,
// blocks do not); device calls are 4-64x the torch-compatible mode's cudaMalloc count (3
// calls per chunk mapped, 2 more when pages move), 0.6-2x in torch's own counting (one per
// mapping of a contiguous range) on 20 of 23 traces. The small pool keeps plain segments.
//
// A segment with nothing mapped gives its address range back (DeviceAllocator::
// take_empty_segments, after empty_cache and after page moves): the reservation is per
// (pool, stream) and device-sized, so keeping those of streams no longer used would exhaust
// the address space of a program that makes a stream per request (test
// TorchBugs.ManyStreamsReuseMemory_Fuser5767).
//
// Unmapping is split in two so the driver calls run outside the allocator's locks (they may
// wait for the device, see locks.hpp): detach() updates the page table under the locks and
// returns the chunks; unmap() runs afterwards, without the locks. The pages stay covered by
// a block marked `releasing` meanwhile, so nobody maps them again early.
//
// IPC export (ipc.cpp, torch >= 2.5's expandable-segment sharing): share() makes one
// descriptor per physical chunk (Backend::vm_export_fd) on the chunk's first export and keeps
// it open while the chunk stays mapped here, so another process can fetch it with
// pidfd_getfd for as long as the exporting memory is live (the contract of ordinary IPC
// handles: the exporter keeps the allocation alive while importers may open it). Detaching
// a chunk hands its descriptor over (DetachedChunk::fd), and unmap() closes it. An exported
// chunk is destroyed when unmapped, never kept as a spare: an importer may still map its
// physical memory, which must not come back here as another allocation.
//
// Thread-safety: used under the owning DeviceAllocator's locks, except the static unmap() and
// destroy() (they touch no segment state).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/memory_ops.hpp"

namespace cudakit::memory {

struct Block;

// Driver calls made for expandable segments (counted for the replay benchmark and tests).
// Relaxed atomics: unmap/destroy run outside the allocator's locks.
struct VmCallCounts {
  std::atomic<std::uint64_t> create{0}, map{0}, unmap{0}, destroy{0};
  std::atomic<std::uint64_t> reused{0};  // maps of a spare handle (no create, no destroy)
  std::atomic<std::uint64_t> access{0};  // access grants: one per run of chunks mapped
  static void bump(std::atomic<std::uint64_t>& c) noexcept {
    c.fetch_add(1, std::memory_order_relaxed);
  }
};

struct ExpandableSegment {
  ExpandableSegment(detail::MemoryOps& b, int device, detail::StreamHandle stream,
                    std::size_t reserve_bytes, std::size_t unit_bytes, bool small);
  ~ExpandableSegment();  // unmaps and releases (skipped at process exit)
  ExpandableSegment(const ExpandableSegment&) = delete;
  ExpandableSegment& operator=(const ExpandableSegment&) = delete;

  // A physical chunk taken out of the page table, to be unmapped (and destroyed or reused).
  struct DetachedChunk {
    std::uintptr_t va = 0;
    std::size_t bytes = 0;  // the chunk's own size (chunks differ in size)
    detail::PhysMemHandle handle = 0;
    int fd = -1;  // exported descriptor (closed by unmap; the chunk must then be destroyed)
  };
  // A chunk's export: its descriptor in this process and a process-wide serial number (an
  // importer's cache tells re-exports of reused descriptor numbers apart by it).
  struct SharedChunk {
    int fd = -1;
    std::uint64_t serial = 0;
    std::size_t bytes = 0;  // the chunk's size
  };
  // A physical handle unmapped to be mapped again elsewhere, and its size.
  struct Spare {
    detail::PhysMemHandle handle = 0;
    std::size_t bytes = 0;
  };

  // Maps [addr, addr+bytes) (unit-aligned, all unmapped; addr+bytes <= limit, the end of the
  // unmapped run) with chunks of at most max_chunk bytes: at each place the largest chunk its
  // alignment allows, no bigger than needed to cover the rest (so the mapping ends at most one
  // chunk-rounding past addr+bytes, never past limit). Spares (any power-of-two multiple of
  // the unit) are used first: one of the planned size, else the largest smaller one; the rest
  // are created. Returns the end address of the mapping, or 0 on out-of-memory (then nothing
  // new stays mapped; spares taken are handed back), also when the new chunks would pass
  // max_new_bytes (the memory-fraction limit's room: spares that do not fit the plan's
  // places must not let it create past the limit). *from_spares: bytes mapped from spares.
  // A driver error other than out-of-memory is rethrown after the same rollback.
  std::uintptr_t map(std::uintptr_t addr, std::size_t bytes, std::uintptr_t limit,
                     std::size_t max_chunk, std::size_t max_new_bytes, std::vector<Spare>& spares,
                     VmCallCounts& calls, std::size_t* from_spares);
  // The largest run of whole chunks inside [addr, addr+bytes) ({0,0} if none).
  std::pair<std::uintptr_t, std::uintptr_t> unmappable(std::uintptr_t addr,
                                                       std::size_t bytes) const;
  // Takes the mapped chunks inside [addr, addr+bytes) (chunk boundaries) out of the page
  // table (they read as unmapped from now on) and appends them to `out`. Returns their bytes.
  std::size_t detach(std::uintptr_t addr, std::size_t bytes, std::vector<DetachedChunk>& out);
  // The chunks covering [addr, addr+bytes) (all must be mapped), in address order; exports
  // (vm_export_fd) those not exported yet. Throws what vm_export_fd throws (NotSupportedError
  // when the backend's chunks cannot be shared); chunks exported before a failure stay so.
  std::vector<SharedChunk> share(std::uintptr_t addr, std::size_t bytes);
  // Driver calls, no allocator lock needed or wanted. unmap also closes exported descriptors.
  static void unmap(detail::MemoryOps& backend, const std::vector<DetachedChunk>& chunks,
                    VmCallCounts& calls);
  static void destroy(detail::MemoryOps& backend, detail::PhysMemHandle h, VmCallCounts& calls);

  std::size_t mapped_bytes() const noexcept { return mapped_units_ * unit_; }
  std::size_t unit_bytes() const noexcept { return unit_; }
  bool is_mapped(std::uintptr_t addr) const noexcept { return len_[(addr - base) / unit_] != 0; }
  // Start of the chunk holding addr (mapped).
  std::uintptr_t chunk_start(std::uintptr_t addr) const noexcept {
    const std::size_t u = (addr - base) / unit_;
    return base + (u - u % len_[u]) * unit_;
  }

  detail::MemoryOps& backend;
  int device;
  detail::StreamHandle stream;
  bool small;
  std::uintptr_t base = 0;
  std::size_t reserved = 0;
  std::uint64_t id = 0;
  Block* first = nullptr;  // lowest-address block (maintained on merge)

 private:
  std::size_t unit_ = 0;
  // Per unit: the length in units of the chunk covering it (0 = unmapped), and the chunk's
  // physical handle at its first unit.
  std::vector<std::uint32_t> len_;
  std::vector<detail::PhysMemHandle> handle_;
  std::size_t mapped_units_ = 0;
  std::unordered_map<std::size_t, SharedChunk> exported_;  // first unit of a chunk -> export
};

}  // namespace cudakit::memory
