// Sanitizer: the check-and-record step behind every op, declared access and graph replay.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/memory_ops.hpp"
#include "cudakit/sanitizer.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"
#include "sanitizer/hooks.hpp"
#include "sanitizer/tracker.hpp"

namespace cudakit::sanitizer::detail {

namespace {

// Bytes [lo, hi) a view covers, relative to its storage's start (every byte between its lowest
// and highest element). False for an empty view.
bool extent(const Tensor& t, std::uint64_t& lo, std::uint64_t& hi) {
  std::int64_t first = t.storage_offset(), last = t.storage_offset();
  const Shape& sizes = t.sizes();
  const Shape& strides = t.strides();
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return false;  // empty view: touches nothing
    const std::int64_t span = (sizes[d] - 1) * strides[d];
    (span < 0 ? first : last) += span;
  }
  const auto es = static_cast<std::int64_t>(t.element_size());
  lo = static_cast<std::uint64_t>(first * es);
  hi = static_cast<std::uint64_t>((last + 1) * es);
  return true;
}

void add_name(Pending& p, const char* name) {
  if (!name) {
    p.is_output = true;
    return;
  }
  for (int i = 0; i < p.nnames; ++i)
    if (p.names[static_cast<std::size_t>(i)] == name) return;
  if (p.nnames < kMaxNames) p.names[static_cast<std::size_t>(p.nnames++)] = name;
}

// A raw device range: the tracked allocation holding it, or a new (backfilled) one keyed by
// the pointer itself.
void resolve_raw(std::uintptr_t ptr, std::uint64_t nbytes, Pending& p) {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  if (Tracker::get().containing(ptr, base, size)) {
    p.base = base;
    p.begin = ptr - base;
    p.size_hint = size;
  } else {
    p.base = ptr;
    p.begin = 0;
    p.size_hint = nbytes;
  }
  p.end = p.begin + nbytes;
  p.exact = false;
}

bool resolve_tensor(const Tensor& t, const char* name, bool write, Pending& p) {
  if (!t.defined() || !t.is_cuda()) return false;
  const auto& st = t.storage();
  if (!st->data()) return false;
  std::uint64_t lo = 0, hi = 0;
  if (!extent(t, lo, hi)) return false;
  const auto base = reinterpret_cast<std::uintptr_t>(st->data());
  p.data_ptr = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  p.device = t.device().index;
  p.write = write;
  if (st->is_external()) {
    resolve_raw(base + lo, hi - lo, p);  // a DLPack alias may point into a tracked allocation
  } else {
    p.base = base;
    p.begin = lo;
    p.end = hi;
    p.size_hint = st->nbytes();
  }
  p.shard = Tracker::shard_of(p.base);
  add_name(p, name);
  return true;
}

// Merges operands naming the same bytes (a + a, add_'s self and out).
int merge_duplicates(Pending* ops, int n) {
  int m = 0;
  for (int i = 0; i < n; ++i) {
    bool merged = false;
    for (int j = 0; j < m; ++j) {
      Pending& q = ops[j];
      if (q.base == ops[i].base && q.begin == ops[i].begin && q.end == ops[i].end) {
        q.write = q.write || ops[i].write;
        q.is_output = q.is_output || ops[i].is_output;
        for (int k = 0; k < ops[i].nnames; ++k) add_name(q, ops[i].names[static_cast<std::size_t>(k)]);
        merged = true;
        break;
      }
    }
    if (!merged) ops[m++] = ops[i];
  }
  return m;
}

struct Conflict {
  int op;
  AccessRec previous;
  std::size_t alloc_size;
  int device;
  const Site* alloc_site;
};

bool overlaps(const AccessRec& r, const Pending& p) { return r.begin < p.end && p.begin < r.end; }
bool covers(const Pending& p, const AccessRec& r) { return p.begin <= r.begin && r.end <= p.end; }

cudakit::sanitizer::Access describe(const AccessRec& r, StreamState* st, const Site* site) {
  cudakit::sanitizer::Access a;
  a.write = r.kind != Kind::read;
  a.stream = st ? st->handle : nullptr;
  a.device = st ? st->device : -1;
  a.kernel = site ? site->kernel : "?";
  for (int i = 0; i < kMaxNames; ++i)
    if (const char* n = r.names[static_cast<std::size_t>(i)]) a.aliases.emplace_back(n);
  a.is_output = r.is_output;
  a.stack = format_site(site);
  return a;
}

std::vector<cudakit::sanitizer::UnsynchronizedAccess> build_reports(
    const std::vector<Conflict>& conflicts, const Pending* ops, const Site* site,
    StreamState& st, std::uint64_t seq) {
  Tracker& t = Tracker::get();
  std::vector<cudakit::sanitizer::UnsynchronizedAccess> out;
  for (const Conflict& c : conflicts) {
    const Pending& p = ops[c.op];
    cudakit::sanitizer::UnsynchronizedAccess u;
    u.data_ptr = p.data_ptr ? p.data_ptr : p.base + p.begin;
    u.allocation = p.base;
    u.allocation_size = c.alloc_size;
    u.overlap_begin = p.base + std::max(p.begin, c.previous.begin);
    u.overlap_end = p.base + std::min(p.end, c.previous.end);
    AccessRec cur;
    cur.kind = p.write ? Kind::write : Kind::read;
    cur.names = p.names;
    cur.is_output = p.is_output;
    cur.seq = seq;
    u.current = describe(cur, &st, site);
    u.previous = describe(c.previous, t.stream_by_id(c.previous.stream), c.previous.site);
    if (c.alloc_site) u.allocation_stack = format_site(c.alloc_site);
    out.push_back(std::move(u));
  }
  return out;
}

}  // namespace

void run_access(const Site* site, StreamHandle s, int device, Pending* ops, int n,
                bool distinct) {
  if (!distinct) n = merge_duplicates(ops, n);
  if (n == 0) return;
  if (capture_record(s, ops, n, site)) return;
  Tracker& t = Tracker::get();
  StreamState& st = t.stream(s, device);

  unsigned shard_ids[16];
  std::vector<unsigned> many;
  unsigned* ids = shard_ids;
  if (n > 16) {
    many.resize(static_cast<std::size_t>(n));
    ids = many.data();
  }
  for (int i = 0; i < n; ++i) ids[i] = ops[i].shard;
  std::sort(ids, ids + n);
  const int nshards = static_cast<int>(std::unique(ids, ids + n) - ids);

  std::vector<Conflict> conflicts;
  std::uint64_t seq = 0;
  {
    std::unique_lock sl(st.mu);
    t.merge_host(st);
    for (int i = 0; i < nshards; ++i) t.shard(ids[i]).mu.lock();
    struct Unlock {
      Tracker& t;
      const unsigned* ids;
      int n;
      ~Unlock() {
        for (int i = n; i-- > 0;) t.shard(ids[i]).mu.unlock();
      }
    } unlock{t, ids, nshards};

    // Check every operand against the state before this op.
    AllocState* state_buf[16];
    std::vector<AllocState*> state_vec;
    AllocState** states = state_buf;
    if (n > 16) {
      state_vec.resize(static_cast<std::size_t>(n));
      states = state_vec.data();
    }
    for (int i = 0; i < n; ++i) {
      Pending& p = ops[i];
      auto& allocs = t.shard(p.shard).allocs;
      auto it = allocs.find(p.base);
      if (it == allocs.end()) {
        // Not seen allocated (enabled later, foreign memory, a graph's temporary): backfill,
        // as CSAN does.
        AllocState a;
        a.size = std::max<std::size_t>(p.size_hint, p.end);
        a.device = p.device;
        a.stale_prone = !p.exact || distinct;  // a raw range, or a replay's (maybe freed) buffer
        if (a.stale_prone) t.stale_prone.fetch_add(1, std::memory_order_relaxed);
        it = allocs.emplace(p.base, std::move(a)).first;
        t.n_allocs.fetch_add(1, std::memory_order_relaxed);
      } else if (it->second.size < p.end) {
        it->second.size = p.end;  // a backfilled foreign range used further out
      }
      AllocState& a = it->second;
      states[i] = &a;
      for (const AccessRec& r : a.accesses) {
        if (!overlaps(r, p)) continue;
        if (!p.write && r.kind == Kind::read) continue;
        if (r.stream == st.id || st.clock.get(r.stream) >= r.seq) continue;
        const bool dup = std::any_of(conflicts.begin(), conflicts.end(), [&](const Conflict& c) {
          return c.op == i && c.previous.stream == r.stream && c.previous.seq == r.seq;
        });
        if (!dup) conflicts.push_back(Conflict{i, r, a.size, a.device, a.alloc_site});
      }
    }
    seq = st.clock.get(st.id) + 1;
    if (!conflicts.empty() && raise_mode()) {
      // Nothing recorded: the op will not be enqueued.
    } else {
      st.clock.set(st.id, seq);
      st.own_seq.store(seq, std::memory_order_release);
      Clock host;
      bool have_host = false;
      for (int i = 0; i < n; ++i) {
        const Pending& p = ops[i];
        AllocState& a = *states[i];
        auto& acc = a.accesses;
        // Drop what this access subsumes: anything a write covers (a later access ordered
        // after the write is ordered after them, or the race was reported), and reads covered
        // by a read ordered after them (a later write ordered after this read is ordered after
        // them too). Writes are never dropped for a read: a later read need not be ordered
        // after this read.
        acc.erase(std::remove_if(acc.begin(), acc.end(),
                                 [&](const AccessRec& r) {
                                   if (!covers(p, r)) return false;
                                   if (p.write) return true;
                                   return r.kind == Kind::read &&
                                          (r.stream == st.id || st.clock.get(r.stream) >= r.seq);
                                 }),
                  acc.end());
        AccessRec rec;
        rec.begin = p.begin;
        rec.end = p.end;
        rec.seq = seq;
        rec.stream = st.id;
        rec.kind = p.write ? Kind::write : Kind::read;
        rec.is_output = p.is_output;
        rec.site = site;
        rec.names = p.names;
        acc.push_back(rec);
        if (acc.size() > a.sweep_at) {
          // Partial, unordered accesses pile up (rows of one buffer written from several
          // streams): drop those the host has waited for, which every later access is
          // ordered after. Still many: sweep again only after twice as many.
          if (!have_host) {
            host = t.host_snapshot();
            have_host = true;
          }
          acc.erase(std::remove_if(acc.begin(), acc.end(),
                                   [&](const AccessRec& r) {
                                     return &r != &acc.back() && host.get(r.stream) >= r.seq;
                                   }),
                    acc.end());
          if (acc.size() > a.sweep_at / 2) a.sweep_at *= 2;
        }
      }
    }
  }
  t.n_accesses.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
  if (conflicts.empty()) return;
  t.n_races.fetch_add(conflicts.size(), std::memory_order_relaxed);
  auto reports = build_reports(conflicts, ops, site, st, seq);
  if (raise_mode()) throw cudakit::sanitizer::CUDASanitizerErrors(std::move(reports));
  for (const auto& r : reports) warn(r.message());
}

void op(const char* kernel, StreamHandle s, int device, std::initializer_list<Operand> reads,
        std::initializer_list<Operand> writes) {
  Pending ops[8];
  int n = 0;
  for (const Operand& o : reads)
    if (n < 8 && resolve_tensor(*o.tensor, o.name, false, ops[n])) ++n;
  for (const Operand& o : writes)
    if (n < 8 && resolve_tensor(*o.tensor, o.name, true, ops[n])) ++n;
  if (n == 0) return;
  const Site* site = capture_site(kernel, __builtin_frame_address(0), true);
  run_access(site, s, device, ops, n);
}

}  // namespace cudakit::sanitizer::detail

namespace cudakit::sanitizer {

namespace ds = cudakit::sanitizer::detail;

Buffer::Buffer(const Tensor& t, const char* name) : name(name) {
  std::uint64_t lo = 0, hi = 0;
  if (!t.defined() || !t.is_cuda() || !t.storage()->data() || !ds::extent(t, lo, hi)) return;
  ptr = static_cast<const char*>(t.storage()->data()) + lo;
  nbytes = static_cast<std::size_t>(hi - lo);
  if (!t.storage()->is_external()) allocation = t.storage()->data();
}

void declare_access(std::span<const Buffer> reads, std::span<const Buffer> writes,
                    std::optional<StreamRef> stream, std::string_view kernel) {
  if (!ds::on()) return;
  std::vector<ds::Pending> ops;
  ops.reserve(reads.size() + writes.size());
  int device = -1;
  auto add = [&](const Buffer& b, bool write) {
    if (!b.ptr || b.nbytes == 0) return;
    ds::Pending p;
    const auto ptr = reinterpret_cast<std::uintptr_t>(b.ptr);
    if (b.allocation) {
      p.base = reinterpret_cast<std::uintptr_t>(b.allocation);
      p.begin = ptr - p.base;
      p.end = p.begin + b.nbytes;
      p.size_hint = p.end;
    } else {
      ds::resolve_raw(ptr, b.nbytes, p);
    }
    // Host memory (pageable or pinned) is not tracked.
    int dev = -1;
    std::uintptr_t base = 0;
    std::size_t size = 0;
    if (b.allocation || ds::Tracker::get().containing(ptr, base, size)) {
      auto& sh = ds::Tracker::get().shard(ds::Tracker::shard_of(p.base));
      std::lock_guard lock(sh.mu);
      if (auto it = sh.allocs.find(p.base); it != sh.allocs.end()) dev = it->second.device;
    }
    if (dev < 0) dev = cudakit::detail::memory_ops().pointer_device(b.ptr);
    if (dev < 0) return;
    p.device = dev;
    p.data_ptr = ptr;
    p.write = write;
    p.shard = ds::Tracker::shard_of(p.base);
    if (b.name) ds::add_name(p, ds::intern(b.name));
    if (device < 0) device = dev;
    ops.push_back(p);
  };
  for (const Buffer& b : reads) add(b, false);
  for (const Buffer& b : writes) add(b, true);
  if (ops.empty()) return;
  const StreamRef s = stream ? *stream : current_stream(device);
  const char* name = ds::intern(kernel.empty() ? std::string_view("foreign kernel") : kernel);
  const ds::Site* site = ds::capture_site(name, __builtin_frame_address(0), true);
  ds::run_access(site, s.handle(), s.device() >= 0 ? s.device() : device, ops.data(),
                 static_cast<int>(ops.size()));
}

}  // namespace cudakit::sanitizer
