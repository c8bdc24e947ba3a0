// Which stack a trace entry and a block show (torch's rules), see alloc_trace.hpp.
#include "memory/alloc_trace.hpp"

namespace cudakit::memory {

thread_local PendingStack* t_pending = nullptr;

void AllocTrace::record(const char* action, std::uintptr_t addr, std::size_t size,
                        detail::StreamHandle stream, Block* b) {
  // torch's rules: the allocation stack is kept on the block (context >= "state") and shown
  // on the alloc entry (>= "alloc"); free entries show the free's own stack with "all", else
  // the allocation stack; a deferred free_completed (record_stream) shows the allocation's.
  const int level = history_context_level();
  PendingStack* p = t_pending;
  auto op_stack = [&]() -> StackRecord* {
    if (!p || !p->cap.valid) return nullptr;
    if (!p->record) p->record = recorder_.adopt(p->cap);
    return p->record;
  };
  StackRecord* shown = nullptr;
  if (b && action[0] == 'a') {  // "alloc"
    StackRecord* s = level >= kContextState ? op_stack() : nullptr;
    HistoryRecorder::retain(s);
    drop_stack(b);
    b->stack = s;
    shown = level >= kContextAlloc ? s : nullptr;
  } else if (b) {  // "free_requested" / "free_completed"
    const bool own = p && p->is_free && level >= kContextAll &&
                     (action[5] == 'r' || p->ptr == b->ptr);
    shown = own ? op_stack() : b->stack;
  } else if (level >= kContextAlloc) {  // segment_* / oom: the stack of the call causing it
    shown = op_stack();
  }
  recorder_.record(action, addr, size, stream, shown, p ? &p->ticks : nullptr);
  // With the trace off (enabled="state") nothing may have kept the call's record. It goes
  // back to the pool here, where it is cached, and is forgotten: pooled by the recorder
  // while still cached, the call's next event (a segment_alloc is followed by its alloc)
  // put it on the block, and the next stack adopted overwrote it.
  if (p && p->record && p->record->refs == 0) {
    recorder_.discard_if_unkept(p->record);
    p->record = nullptr;
  }
}

}  // namespace cudakit::memory
