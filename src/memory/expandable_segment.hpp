// Expandable ("virtual memory") segments: a reserved address range that is backed with
// physical memory on demand, so blocks in it stay contiguous and mergeable however the live
// set grows and shrinks. Built on the seam's vm_* calls (emulated too).
//
// Physical memory comes in "chunks": each grow maps its run of missing pages with ONE
// physical allocation (create + map + set-access once), not one per 2 MiB page — on a GPU
// each driver call costs microseconds, and per-page mapping made the expandable mode 8x
// slower than plain segments. A chunk is unmapped only as a whole, so shrinking works at
// chunk granularity (chunks follow allocation sizes, so this costs little).
//
// Unmapping is split in two so the driver calls run outside the allocator's locks (they may
// wait for the device, see locks.hpp): detach() updates the page table under the locks and
// returns the chunks; release() unmaps and destroys them afterwards, without the locks. The
// pages stay covered by a block marked `releasing` meanwhile, so nobody maps them again early.
//
// Thread-safety: used under the owning DeviceAllocator's locks, except release() (static,
// touches no segment state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.hpp"

namespace cudakit::memory {

struct Block;

struct ExpandableSegment {
  ExpandableSegment(detail::Backend& b, int device, detail::StreamHandle stream,
                    std::size_t reserve_bytes, bool small);
  ~ExpandableSegment();  // unmaps and releases (skipped at process exit)
  ExpandableSegment(const ExpandableSegment&) = delete;
  ExpandableSegment& operator=(const ExpandableSegment&) = delete;

  // A physical chunk taken out of the page table, to be unmapped and destroyed.
  struct DetachedChunk {
    std::uintptr_t va = 0;
    std::size_t bytes = 0;
    detail::PhysMemHandle handle = 0;
  };

  // Maps the unmapped pages covering [addr, addr+bytes) (page-aligned), one chunk of at most
  // `max_chunk_pages` pages per run of unmapped pages. False on out-of-memory (then nothing
  // new stays mapped).
  bool map(std::uintptr_t addr, std::size_t bytes, std::size_t max_chunk_pages);
  // The largest sub-range of [addr, addr+bytes) made of whole mapped chunks ({0,0} if none).
  std::pair<std::uintptr_t, std::uintptr_t> unmappable(std::uintptr_t addr,
                                                       std::size_t bytes) const;
  // Takes the chunks lying entirely inside [addr, addr+bytes) out of the page table (their
  // pages read as unmapped from now on) and appends them to `out`. Returns their bytes.
  std::size_t detach(std::uintptr_t addr, std::size_t bytes, std::vector<DetachedChunk>& out);
  // Unmaps and destroys detached chunks (no allocator lock needed or wanted).
  static void release(detail::Backend& backend, const std::vector<DetachedChunk>& chunks);
  std::size_t mapped_bytes() const noexcept { return mapped_pages_ * page_; }
  std::size_t chunks_created() const noexcept { return chunks_created_; }
  std::size_t chunks_destroyed() const noexcept { return chunks_destroyed_; }
  // Pages per chunk at most: the expandable_segments_chunk_pages setting (default 8). Larger
  // chunks mean fewer driver calls but coarser shrinking (measured on the traces: 8 pages =
  // 16 MiB keeps peak reserved / peak allocated <= 1.03 on all three).

  detail::Backend& backend;
  int device;
  detail::StreamHandle stream;
  bool small;
  std::uintptr_t base = 0;
  std::size_t reserved = 0;
  std::size_t page_ = 0;
  std::uint64_t id = 0;
  Block* first = nullptr;  // lowest-address block (maintained on merge)

 private:
  static constexpr std::uint32_t kUnmapped = UINT32_MAX;
  // Per page: index of the first page of its chunk, or kUnmapped.
  std::vector<std::uint32_t> head_;
  // Per chunk head page: the physical handle and the chunk's page count.
  struct Chunk {
    detail::PhysMemHandle handle = 0;
    std::uint32_t pages = 0;
  };
  std::vector<Chunk> chunk_;
  std::size_t mapped_pages_ = 0;
  std::size_t chunks_created_ = 0;
  std::size_t chunks_destroyed_ = 0;
};

}  // namespace cudakit::memory
