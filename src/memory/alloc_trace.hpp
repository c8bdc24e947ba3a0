// The device allocator's side of allocation history (history.hpp has the recorder and the
// cost model): the stack of the allocator call in progress on this thread, and the rules that
// decide which stack each trace entry and block shows.
//
// Thread-safety: PendingScope is per thread. AllocTrace is used under the owning allocator's
// fast lock.
#pragma once

#include <cstdint>

#include "backend/types.hpp"
#include "memory/block.hpp"
#include "memory/history.hpp"

namespace cudakit::memory {

// The stack of the allocator call in progress on this thread (history on): captured before
// any lock is taken, adopted into the recorder at the first event that keeps it.
struct PendingStack {
  CapturedStack cap;
  StackRecord* record = nullptr;
  std::uint64_t record_pooled = 0;  // the recorder's pooled() when `record` was adopted
  bool is_free = false;
  std::uintptr_t ptr = 0;   // the pointer being freed
  std::uint64_t ticks = 0;  // timestamp of this call's events
};

// The default TLS model, not initial-exec: initial-exec saved 4% of a recorded pair but marks
// the whole library STATIC_TLS, and then all of its thread_locals must fit in the ~1.6 KB that
// glibc keeps for dlopen'ed libraries (Python imported it with "cannot allocate memory in static
// TLS block" once they grew past it). tests/layout/test_exports.py keeps the flag off.
extern thread_local PendingStack* t_pending;

// Installs `p` as this thread's pending stack for the scope (history on only).
class PendingScope {
 public:
  PendingScope(PendingStack& p, const void* entry_frame, bool is_free, std::uintptr_t ptr) {
    if (!history_enabled()) return;
    p.is_free = is_free;
    p.ptr = ptr;
    capture_stack(p.cap, entry_frame, is_free);
    // One look-up of the thread_local's address (a __tls_get_addr call in the shared
    // library), used again by the destructor.
    PendingStack*& slot = t_pending;
    slot = &p;
    slot_ = &slot;
  }
  ~PendingScope() {
    if (slot_) *slot_ = nullptr;
  }
  PendingScope(const PendingScope&) = delete;
  PendingScope& operator=(const PendingScope&) = delete;

 private:
  PendingStack** slot_ = nullptr;
};

class AllocTrace {
 public:
  // Records a history event (call only when history_enabled()). For alloc/free events `b` is
  // the block: its allocation stack is set on "alloc" and reused by later events.
  // kActionFreePair: a free_requested and its free_completed at once (a block freed with no
  // stream to wait for), one call and, usually, one ring slot.
  void record(TraceAction action, std::uintptr_t addr, std::size_t size,
              detail::StreamHandle stream, Block* b);
  // Drops the block's allocation stack (the block is free again).
  void drop_stack(Block* b) noexcept {
    if (b->stack) {
      recorder_.release(b->stack);
      b->stack = nullptr;
    }
  }
  HistoryRecorder& recorder() noexcept { return recorder_; }

 private:
  HistoryRecorder recorder_;
};

}  // namespace cudakit::memory
