// Stream gates of the stream-ordered transfers (read_into / write_from): later work on the
// caller's stream waits, on the device, for a word in pinned host memory that the transfer
// sets when it completes (Backend::stream_wait_value32).
//
// Why not a host task that blocks until the transfer completes (the first design): a host
// function must not wait for work that its stream does not order before it
// (cuLaunchHostFunc), and the driver runs every stream's host functions on one thread. On the
// H200 (driver 580) such gates hung the stream-ordered tests, C++ and Python.
//
// Words: pages of 1024 words from host_alloc_pinned, never freed (a process needs as many
// words as gated transfers in flight at once). A word's value only grows: a gate waits for
// value >= target, target = the word's value when acquired + 1, so a word is recycled as
// soon as it is signalled (a stream still waiting for an older target is satisfied by any
// later value). One word would wrap after 2^32 transfers.
//
// Thread-safety: both functions are thread-safe.
#pragma once

#include <cstdint>

namespace cudakit::gds::io {

struct GateWord {
  std::uint32_t* word = nullptr;  // null: no gate
  std::uint32_t target = 0;
};

// A free word and its next target. OutOfMemoryError if no pinned page can be allocated.
GateWord acquire_gate_word();
// Opens the gate (*word = target, visible to the device) and recycles the word. No-op on a
// null word.
void signal_gate_word(GateWord g) noexcept;

}  // namespace cudakit::gds::io
