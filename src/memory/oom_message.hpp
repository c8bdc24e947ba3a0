// The diagnosis part of the out-of-memory message (pytorch#29554): why this request failed —
// the live set is too big for the device, or the free memory is there but in pieces
// (fragmentation), or on other streams, or behind the memory-fraction limit — and what to
// do about it. One pure function of the facts, so the message is testable without a device
// and the front of the message (raise_oom in device_release.cpp, torch's wording) stays
// separate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cudakit::memory {

struct OomFacts {
  std::size_t requested = 0;     // the request as rounded by the allocator
  std::size_t needed = 0;        // what growing would have had to obtain (segment size)
  std::size_t allocated = 0;     // live bytes (all pools of the device)
  std::size_t reserved = 0;      // held from the device (all pools)
  std::size_t device_free = 0;   // what the driver still has
  std::size_t limit_room = SIZE_MAX;  // what the memory fraction still allows (SIZE_MAX: none)
  // Free blocks the allocator holds after its release steps: the largest one usable for the
  // request (same pool kind and stream) and the largest on any stream or pool.
  std::size_t largest_free = 0;
  std::size_t largest_free_any_stream = 0;
  bool expandable = false;       // expandable segments in use for the request's pool
};

// The sentences that follow the message's front, each ending with ". ".
std::string oom_diagnosis(const OomFacts& f);

// "1.50 GiB", "512.00 MiB", "3.00 KiB", "12 bytes" (torch's format).
std::string format_bytes(std::size_t n);

}  // namespace cudakit::memory
