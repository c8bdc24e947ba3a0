// Which stack a trace entry and a block show (torch's rules), see alloc_trace.hpp.
#include "memory/alloc_trace.hpp"

namespace cudakit::memory {

thread_local PendingStack* t_pending = nullptr;

void AllocTrace::record(TraceAction action, std::uintptr_t addr, std::size_t size,
                        detail::StreamHandle stream, Block* b) {
  // Before any stack is adopted: a re-enable clears the ring first (history.hpp, sync()).
  recorder_.sync();
  // torch's rules: the allocation stack is kept on the block (context >= "state") and shown
  // on the alloc entry (>= "alloc"); free entries show the free's own stack with "all", else
  // the allocation stack; a deferred free_completed (record_stream) shows the allocation's.
  // The caller checked history_enabled(), so the level is the setting's.
  const int level = g_hot.context.load(std::memory_order_relaxed);
  PendingStack* p = t_pending;
  auto op_stack = [&]() -> StackRecord* {
    if (!p || !p->cap.valid) return nullptr;
    // The record adopted by an earlier event of this call is reused unless records went back
    // to the pool since (a re-enable's clear, a ring overwrite, another thread while the
    // locks were dropped): it may be one of them, and may hold another stack by now.
    if (!p->record || p->record_pooled != recorder_.pooled()) {
      p->record = recorder_.adopt(p->cap);
      p->record_pooled = recorder_.pooled();
    }
    return p->record;
  };
  StackRecord* shown = nullptr;
  if (action == kActionAlloc) {
    StackRecord* s = level >= kContextState ? op_stack() : nullptr;
    HistoryRecorder::retain(s);
    drop_stack(b);
    b->stack = s;
    shown = level >= kContextAlloc ? s : nullptr;
  } else if (b) {  // free_requested / free_completed / both
    // The free's own stack: context "all", in the free call itself; free_completed only for
    // the block being freed (not a deferred one completing during another free).
    const bool own_call = p && p->is_free && level >= kContextAll;
    const bool own_completed = own_call && p->ptr == b->ptr;
    if (action == kActionFreePair && own_call != own_completed) {  // two different stacks
      recorder_.record(kActionFreeRequested, addr, size, stream, op_stack(), &p->ticks);
      action = kActionFreeCompleted;
      shown = b->stack;
    } else {
      const bool own = action == kActionFreeRequested ? own_call : own_completed;
      shown = own ? op_stack() : b->stack;
    }
    // With context "state" the stacks stay on the blocks: no trace entry shows one (torch's
    // record_trace drops the context below "alloc"; test_memory_plots_free_stack checks it).
    if (level < kContextAlloc) shown = nullptr;
  } else if (level >= kContextAlloc) {  // segment_* / oom: the stack of the call causing it
    shown = op_stack();
  }
  const bool traced = recorder_.record(action, addr, size, stream, shown, p ? &p->ticks : nullptr);
  // With the trace off (enabled="state") nothing may have kept the call's record. It goes
  // back to the pool here, where it is cached, and is forgotten: pooled by the recorder
  // while still cached, the call's next event (a segment_alloc is followed by its alloc)
  // put it on the block, and the next stack adopted overwrote it. (With the trace on, every
  // record adopted was shown, so the ring retained it.)
  if (!traced && p && p->record && p->record->refs == 0) {
    recorder_.discard_if_unkept(p->record);
    p->record = nullptr;
  }
}

}  // namespace cudakit::memory
