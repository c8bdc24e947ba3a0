// The hot calls: range_push/pop, range_start/end, mark, and their per-thread bookkeeping.
// Each also reports to the profiler's tracer while one records (trace_hook.hpp).
//
// Cost with no tool attached is what matters (annotations stay in production code): each call
// is NVTX's null-pointer test plus a thread_local counter. The counters of the first
// kFastSlots domains are a plain thread_local array (trivially constructed: no init guard on
// access); only a process with more domains than that takes the overflow path.
#include <atomic>
#include <cstdint>
#include <vector>

#include "nvtx/nvtx_c.hpp"
#include "nvtx/trace_hook.hpp"

namespace cudakit::nvtx {
namespace {

constexpr int kFastSlots = 32;
thread_local int tls_depth[kFastSlots];

[[gnu::noinline]] int& overflow_depth(int slot) {
  thread_local std::vector<int> more;  // domains past kFastSlots: rare, allowed to allocate
  auto i = static_cast<std::size_t>(slot - kFastSlots);
  if (more.size() <= i) more.resize(i + 1, 0);
  return more[i];
}

inline int& depth_of(int slot) noexcept {
  if (slot < kFastSlots) [[likely]] return tls_depth[slot];
  return overflow_depth(slot);
}

inline int push_depth(int slot) noexcept { return depth_of(slot)++; }

inline int pop_depth(int slot) noexcept {
  int& d = depth_of(slot);
  if (d == 0) return -1;  // nothing of ours open: keep the count at zero
  return --d;
}

// Ids when no tool hands one out: <thread tag:32><per-thread count:32>, unique in the process
// without a shared atomic per call (the tag is taken once per thread, and again on wrap).
std::atomic<std::uint32_t> next_thread_tag{0};
thread_local std::uint64_t tls_id_base = 0;
thread_local std::uint32_t tls_id_count = 0;

std::uint64_t own_range_id() noexcept {
  if (tls_id_base == 0 || ++tls_id_count == 0) [[unlikely]] {
    tls_id_base = std::uint64_t{next_thread_tag.fetch_add(1, std::memory_order_relaxed) + 1}
                  << 32;
    tls_id_count = 1;
  }
  return tls_id_base | tls_id_count;
}

// NVTX answers 0 when no tool took the call.
inline std::uint64_t or_own_id(std::uint64_t tool_id) noexcept {
  return tool_id != 0 ? tool_id : own_range_id();
}

}  // namespace

namespace detail {
std::atomic<const TraceHook*> g_trace_hook{nullptr};
}  // namespace detail

namespace {
using detail::trace_hook;
}  // namespace

int range_push(const char* message) noexcept {
  if (const auto* h = trace_hook()) [[unlikely]] h->push(0, "", message);
#if CUDAKIT_WITH_NVTX
  nvtxRangePushA(message ? message : "");
#endif
  return push_depth(0);
}

int range_push(const Attributes& attributes, Domain& domain) noexcept {
  if (const auto* h = trace_hook()) [[unlikely]] {
    h->push(domain.slot(), domain.name().c_str(), attributes.message);
  }
#if CUDAKIT_WITH_NVTX
  nvtxEventAttributes_t ev = detail::event_attributes(attributes);
  nvtxDomainRangePushEx(detail::handle_of(domain), &ev);
#endif
  return push_depth(domain.slot());
}

int range_pop() noexcept {
  if (const auto* h = trace_hook()) [[unlikely]] h->pop(0);
#if CUDAKIT_WITH_NVTX
  nvtxRangePop();  // forwarded even when our count is 0: the push may have come from elsewhere
#endif
  return pop_depth(0);
}

int range_pop(Domain& domain) noexcept {
  if (const auto* h = trace_hook()) [[unlikely]] h->pop(domain.slot());
#if CUDAKIT_WITH_NVTX
  nvtxDomainRangePop(detail::handle_of(domain));
#endif
  return pop_depth(domain.slot());
}

std::uint64_t range_start(const char* message) noexcept {
#if CUDAKIT_WITH_NVTX
  const std::uint64_t id = or_own_id(nvtxRangeStartA(message ? message : ""));
#else
  const std::uint64_t id = own_range_id();
#endif
  if (const auto* h = trace_hook()) [[unlikely]] h->start(id, "", message);
  return id;
}

std::uint64_t range_start(const Attributes& attributes, Domain& domain) noexcept {
#if CUDAKIT_WITH_NVTX
  nvtxEventAttributes_t ev = detail::event_attributes(attributes);
  const std::uint64_t id = or_own_id(nvtxDomainRangeStartEx(detail::handle_of(domain), &ev));
#else
  const std::uint64_t id = own_range_id();
#endif
  if (const auto* h = trace_hook()) [[unlikely]] {
    h->start(id, domain.name().c_str(), attributes.message);
  }
  return id;
}

void range_end(std::uint64_t id) noexcept {
  if (const auto* h = trace_hook()) [[unlikely]] h->end(id);
#if CUDAKIT_WITH_NVTX
  nvtxRangeEnd(id);
#else
  (void)id;
#endif
}

void range_end(std::uint64_t id, Domain& domain) noexcept {
  if (const auto* h = trace_hook()) [[unlikely]] h->end(id);
#if CUDAKIT_WITH_NVTX
  nvtxDomainRangeEnd(detail::handle_of(domain), id);
#else
  (void)id;
  (void)domain;
#endif
}

void mark(const char* message) noexcept {
  if (const auto* h = trace_hook()) [[unlikely]] h->mark("", message);
#if CUDAKIT_WITH_NVTX
  nvtxMarkA(message ? message : "");
#else
  (void)message;
#endif
}

void mark(const Attributes& attributes, Domain& domain) noexcept {
  if (const auto* h = trace_hook()) [[unlikely]] h->mark(domain.name().c_str(), attributes.message);
#if CUDAKIT_WITH_NVTX
  nvtxEventAttributes_t ev = detail::event_attributes(attributes);
  nvtxDomainMarkEx(detail::handle_of(domain), &ev);
#else
  (void)attributes;
  (void)domain;
#endif
}

int depth(const Domain& domain) noexcept { return depth_of(domain.slot()); }

bool tool_attached() noexcept {
#if CUDAKIT_WITH_NVTX
  // After its one-time init NVTX sets every entry the tool did not claim to null (and all of
  // them when no tool loaded); the table is NVTX3's tool ABI, stable across header versions.
  nvtxInitialize(nullptr);
  const auto& g = NVTX_VERSIONED_IDENTIFIER(nvtxGlobals);
  return g.nvtxRangePushA_impl_fnptr || g.nvtxDomainRangePushEx_impl_fnptr ||
         g.nvtxMarkA_impl_fnptr || g.nvtxDomainMarkEx_impl_fnptr ||
         g.nvtxRangeStartA_impl_fnptr || g.nvtxDomainRangeStartEx_impl_fnptr;
#else
  return false;
#endif
}

}  // namespace cudakit::nvtx
