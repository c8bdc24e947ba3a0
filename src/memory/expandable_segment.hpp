// Expandable ("virtual memory") segments: a reserved address range that is backed with
// physical memory page by page on demand, so blocks in it stay contiguous and mergeable
// however the live set grows and shrinks. Built on the seam's vm_* calls (emulated too).
//
// Thread-safety: used under the owning DeviceAllocator's mutex only.
#pragma once

#include <cstddef>
#include <cstdint>
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

  // Maps pages covering [addr, addr+bytes) (page-aligned). False on out-of-memory (then
  // nothing new stays mapped).
  bool map(std::uintptr_t addr, std::size_t bytes);
  // Unmaps the whole pages inside [addr, addr+bytes). Returns bytes unmapped.
  std::size_t unmap(std::uintptr_t addr, std::size_t bytes);
  std::size_t mapped_bytes() const noexcept { return mapped_pages_ * page_; }

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
  std::vector<detail::PhysMemHandle> handles_;  // one per page; 0 = unmapped
  std::size_t mapped_pages_ = 0;
};

}  // namespace cudakit::memory
