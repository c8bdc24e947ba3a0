// The tracer's record store (collector.hpp).
#include "profiler/collector.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace cudakit::profiler::detail {

using cudakit::detail::trace_clock_ns;

namespace {
constexpr std::size_t kTextBlock = 64 * 1024;
}  // namespace

struct Collector::ThreadState {
  std::atomic<int> busy{0};
  std::atomic<bool> owned{true};  // a live thread writes through this state
  std::uint64_t session = 0;      // the session its chunks hold records of
  std::vector<std::unique_ptr<ActivityRecord[]>> chunks;
  std::vector<std::size_t> capacity;  // of each chunk
  std::size_t fill = 0;               // records used in chunks.back()
  std::size_t count = 0;
  std::vector<std::unique_ptr<char[]>> text;
  std::size_t text_fill = 0, text_cap = 0;
  struct Open {
    std::int64_t start_ns;
    const char* name;
    const char* domain;
  };
  std::vector<std::vector<Open>> stacks;  // NVTX push/pop per domain slot

  void reset(std::uint64_t s) {
    session = s;
    chunks.clear();
    capacity.clear();
    fill = 0;
    count = 0;
    text.clear();
    text_fill = text_cap = 0;
    stacks.clear();
  }

  ActivityRecord& next() {
    if (chunks.empty() || fill == capacity.back()) {
      const std::size_t cap = capacity.empty() ? kFirstChunk
                                               : std::min(capacity.back() * 2, kChunk);
      chunks.push_back(std::make_unique<ActivityRecord[]>(cap));
      capacity.push_back(cap);
      fill = 0;
    }
    ++count;
    return chunks.back()[fill++];
  }

  // Copies `s` (NUL-terminated) into the arena; the pointer lives as long as the trace.
  const char* copy(std::string_view s) {
    const std::size_t need = s.size() + 1;
    if (need > text_cap - text_fill) {
      const std::size_t cap = need > kTextBlock ? need : kTextBlock;
      text.push_back(std::make_unique<char[]>(cap));
      text_fill = 0;
      text_cap = cap;
    }
    char* p = text.back().get() + text_fill;
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    text_fill += need;
    return p;
  }
};

Collector& Collector::instance() noexcept {
  static Collector* c = new Collector();  // leaked: backends may deliver until process exit
  return *c;
}

std::uint32_t Collector::thread_id() noexcept {
  thread_local const auto tid = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return tid;
}

std::uint32_t Collector::process_id() noexcept {
  static const auto pid = static_cast<std::uint32_t>(::getpid());
  return pid;
}

Collector::ThreadState* Collector::state() noexcept {
  thread_local ThreadState* tls = nullptr;
  if (tls != nullptr) [[likely]] return tls;
  // Hands the state to the next thread when this one exits.
  struct Release {
    ThreadState* s = nullptr;
    ~Release() {
      if (s) s->owned.store(false, std::memory_order_release);
    }
  };
  thread_local Release release;
  try {
    std::lock_guard lock(mu_);
    ThreadState* st = nullptr;
    for (ThreadState* s : states_) {
      if (!s->owned.load(std::memory_order_acquire)) {
        s->owned.store(true, std::memory_order_relaxed);
        s->stacks.clear();  // the previous owner's open ranges died with it
        st = s;
        break;
      }
    }
    if (st == nullptr) {
      st = new ThreadState();  // never freed: see collector.hpp
      states_.push_back(st);
    }
    release.s = st;
    tls = st;
    return st;
  } catch (...) {
    return nullptr;
  }
}

template <class Fn>
bool Collector::write(Fn&& fn) noexcept {
  const std::uint64_t s = session_.load(std::memory_order_acquire);
  if (s == 0) return false;
  ThreadState* st = state();
  if (st == nullptr) return false;
  st->busy.store(1, std::memory_order_seq_cst);
  bool ok = false;
  if (session_.load(std::memory_order_seq_cst) == s) {
    try {
      if (st->session != s) st->reset(s);
      fn(*st);
      ok = true;
    } catch (...) {  // allocation failure: the record is dropped
    }
  }
  st->busy.store(0, std::memory_order_release);
  return ok;
}

void Collector::begin(std::uint64_t id) {
  std::lock_guard lock(mu_);
  messages_.clear();
  open_ranges_.clear();
  device_mask_.store(0, std::memory_order_relaxed);
  session_.store(id, std::memory_order_seq_cst);
}

Collected Collector::end(std::uint64_t id) {
  Collected out;
  std::lock_guard lock(mu_);
  if (session_.load(std::memory_order_relaxed) == id) {
    session_.store(0, std::memory_order_seq_cst);
  }
  for (ThreadState* st : states_) {
    while (st->busy.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    if (st->session != id) continue;
    for (std::size_t i = 0; i < st->chunks.size(); ++i) {
      out.chunk_sizes.push_back(i + 1 == st->chunks.size() ? st->fill : st->capacity[i]);
      out.chunk_capacity.push_back(st->capacity[i]);
      out.chunks.push_back(std::move(st->chunks[i]));
    }
    out.records += st->count;
    for (auto& t : st->text) out.text.push_back(std::move(t));
    st->reset(0);
  }
  out.messages = std::move(messages_);
  messages_.clear();
  open_ranges_.clear();
  out.device_mask = device_mask_.exchange(0, std::memory_order_relaxed);
  return out;
}

void Collector::record(const ActivityRecord& r) noexcept {
  if (write([&](ThreadState& st) { st.next() = r; })) {
    if (r.device >= 0 && r.device < 64) {
      const std::uint64_t bit = std::uint64_t{1} << r.device;
      if (!(device_mask_.load(std::memory_order_relaxed) & bit)) {
        device_mask_.fetch_or(bit, std::memory_order_relaxed);
      }
    }
  }
}

void Collector::message(std::string_view text) noexcept {
  try {
    std::lock_guard lock(mu_);
    if (session_.load(std::memory_order_relaxed) == 0) return;
    for (const std::string& m : messages_) {
      if (m == text) return;  // repeated conditions (per buffer) are reported once
    }
    messages_.emplace_back(text);
  } catch (...) {
  }
}

void Collector::record_with_text(ActivityRecord r, std::string_view name,
                                 std::string_view domain) noexcept {
  write([&](ThreadState& st) {
    r.name = st.copy(name);
    r.u.range.domain = domain.empty() ? nullptr : st.copy(domain);
    st.next() = r;
  });
}

void Collector::nvtx_push(int slot, const char* domain, const char* message) noexcept {
  if (slot < 0) return;
  const std::int64_t now = trace_clock_ns();
  write([&](ThreadState& st) {
    const auto i = static_cast<std::size_t>(slot);
    if (st.stacks.size() <= i) st.stacks.resize(i + 1);
    st.stacks[i].push_back(ThreadState::Open{
        now, st.copy(message ? message : ""),
        (domain && *domain) ? st.copy(domain) : nullptr});
  });
}

void Collector::nvtx_pop(int slot) noexcept {
  if (slot < 0) return;
  const std::int64_t now = trace_clock_ns();
  write([&](ThreadState& st) {
    const auto i = static_cast<std::size_t>(slot);
    if (st.stacks.size() <= i || st.stacks[i].empty()) return;  // pushed before the trace
    const ThreadState::Open o = st.stacks[i].back();
    st.stacks[i].pop_back();
    ActivityRecord& r = st.next();
    r = ActivityRecord{};
    r.kind = ActivityKind::user_range;
    r.start_ns = o.start_ns;
    r.end_ns = now;
    r.name = o.name;
    r.u.range.domain = o.domain;
    r.stream = thread_id();
  });
}

void Collector::nvtx_start(std::uint64_t id, const char* domain, const char* message) noexcept {
  if (session_.load(std::memory_order_acquire) == 0) return;
  const std::int64_t now = trace_clock_ns();
  try {
    std::lock_guard lock(mu_);
    open_ranges_[id] = OpenRange{now, thread_id(), message ? message : "", domain ? domain : ""};
  } catch (...) {
  }
}

void Collector::nvtx_end(std::uint64_t id) noexcept {
  if (session_.load(std::memory_order_acquire) == 0) return;
  const std::int64_t now = trace_clock_ns();
  OpenRange o;
  try {
    std::lock_guard lock(mu_);
    auto it = open_ranges_.find(id);
    if (it == open_ranges_.end()) return;  // started before the trace, or ended twice
    o = std::move(it->second);
    open_ranges_.erase(it);
  } catch (...) {
    return;
  }
  ActivityRecord r;
  r.kind = ActivityKind::user_range;
  r.start_ns = o.start_ns;
  r.end_ns = now;
  r.id = id;
  r.stream = o.tid;  // shown on the thread that started it
  record_with_text(r, o.name, o.domain);
}

}  // namespace cudakit::profiler::detail
