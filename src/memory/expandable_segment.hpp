// Expandable ("virtual memory") segments: a reserved address range that is backed with
// physical memory on demand, so blocks in it stay contiguous and mergeable however the live
// set grows and shrinks. Built on the seam's vm_* calls (emulated too).
//
// Physical memory comes in uniform "chunks" (one physical allocation each): 2 MiB in the small
// pool, expandable_segments_chunk_pages pages in the large pool (default 4 = 8 MiB). Uniform
// chunks make physical allocations interchangeable: a chunk unmapped in one place is mapped
// again somewhere else without a release + create (DeviceAllocator keeps such "spare" handles
// for the allocation that asked for the pages to move). Rejected: variable chunks sized to each
// run of missing pages (the previous design): a chunk could only be reused for a run of exactly
// its size, and big chunks straddling live blocks could not be unmapped at all.
// Chunk size, measured on five traces (replay, emulated; the footprint budget of 1/32):
// 8 MiB keeps peak reserved / peak allocated <= 1.04 on all; 16 MiB made varlen_infer (650 MiB
// peak) 1.06 (holes smaller than a chunk cannot be unmapped) for half the driver calls; 20 MiB
// (torch's large page) 1.08.
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

#include "backend/backend.hpp"

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
  ExpandableSegment(detail::Backend& b, int device, detail::StreamHandle stream,
                    std::size_t reserve_bytes, std::size_t chunk_bytes, bool small);
  ~ExpandableSegment();  // unmaps and releases (skipped at process exit)
  ExpandableSegment(const ExpandableSegment&) = delete;
  ExpandableSegment& operator=(const ExpandableSegment&) = delete;

  // A physical chunk taken out of the page table, to be unmapped (and destroyed or reused).
  struct DetachedChunk {
    std::uintptr_t va = 0;
    std::size_t bytes = 0;
    detail::PhysMemHandle handle = 0;
    int fd = -1;  // exported descriptor (closed by unmap; the chunk must then be destroyed)
  };
  // A chunk's export: its descriptor in this process and a process-wide serial number (an
  // importer's cache tells re-exports of reused descriptor numbers apart by it).
  struct SharedChunk {
    int fd = -1;
    std::uint64_t serial = 0;
  };

  // Maps every unmapped chunk overlapping [addr, addr+bytes), taking physical handles from
  // the back of `spares` first (they must be chunk_bytes() long) and creating the rest.
  // Returns the bytes newly mapped, or SIZE_MAX on out-of-memory (then nothing new stays
  // mapped; spares taken are handed back).
  std::size_t map(std::uintptr_t addr, std::size_t bytes,
                  std::vector<detail::PhysMemHandle>& spares, VmCallCounts& calls);
  // The largest chunk-aligned sub-range of [addr, addr+bytes) ({0,0} if none).
  std::pair<std::uintptr_t, std::uintptr_t> unmappable(std::uintptr_t addr,
                                                       std::size_t bytes) const;
  // Takes the mapped chunks inside the chunk-aligned [addr, addr+bytes) out of the page
  // table (they read as unmapped from now on) and appends them to `out`. Returns their bytes.
  std::size_t detach(std::uintptr_t addr, std::size_t bytes, std::vector<DetachedChunk>& out);
  // The chunks covering [addr, addr+bytes) (all must be mapped), in address order; exports
  // (vm_export_fd) those not exported yet. Throws what vm_export_fd throws (NotSupportedError
  // when the backend's chunks cannot be shared); chunks exported before a failure stay so.
  std::vector<SharedChunk> share(std::uintptr_t addr, std::size_t bytes);
  // Driver calls, no allocator lock needed or wanted. unmap also closes exported descriptors.
  static void unmap(detail::Backend& backend, const std::vector<DetachedChunk>& chunks,
                    VmCallCounts& calls);
  static void destroy(detail::Backend& backend, detail::PhysMemHandle h, VmCallCounts& calls);

  std::size_t mapped_bytes() const noexcept { return mapped_chunks_ * chunk_; }
  std::size_t chunk_bytes() const noexcept { return chunk_; }
  bool is_mapped(std::uintptr_t addr) const noexcept { return handle_[(addr - base) / chunk_] != 0; }

  detail::Backend& backend;
  int device;
  detail::StreamHandle stream;
  bool small;
  std::uintptr_t base = 0;
  std::size_t reserved = 0;
  std::uint64_t id = 0;
  Block* first = nullptr;  // lowest-address block (maintained on merge)

 private:
  std::size_t chunk_ = 0;
  std::vector<detail::PhysMemHandle> handle_;  // per chunk; 0 = unmapped
  std::size_t mapped_chunks_ = 0;
  std::unordered_map<std::size_t, SharedChunk> exported_;  // chunk index -> its export
};

}  // namespace cudakit::memory
