// Tagged pools: their VM-backed segments, sleep / wake of one pool (DeviceAllocator), and the
// public API (use_sleep_pool, sleep, wake_up, sleep_state). sleep_pool.hpp has the design.
#include "memory/sleep_pool.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/device_ops.hpp"
#include "backend/graph_ops.hpp"
#include "backend/memory_ops.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "memory/deferred_free.hpp"
#include "memory/device_allocator.hpp"
#include "memory/host_allocator.hpp"
#include "memory/raw.hpp"

namespace cudakit::memory {

namespace {
// A pool's first reservation: the device's memory (a pool can never map more at once), at
// most 256 GiB so that many tags on an emulated device claiming petabytes stay cheap.
constexpr std::size_t kMaxReservation = std::size_t(256) << 30;

std::size_t round_up(std::size_t n, std::size_t g) { return (n + g - 1) / g * g; }

std::string quoted(const std::string& tag) { return "'" + tag + "'"; }

void free_host(std::vector<std::pair<void*, std::size_t>>& host) {
  for (auto& [p, n] : host) host_allocator().free(p);
  host.clear();
}
}  // namespace

std::vector<SleepCopy> sleep_plan_copies(
    const std::vector<std::pair<std::uintptr_t, std::size_t>>& runs,
    const std::vector<std::pair<void*, std::size_t>>& host, bool to_host) {
  using Copy = SleepCopy;
  std::vector<Copy> out;
  std::size_t piece = 0, in_piece = 0;
  for (const auto& [va, bytes] : runs) {
    std::size_t done = 0;
    while (done < bytes) {
      const std::size_t n = std::min(bytes - done, host[piece].second - in_piece);
      void* dev = reinterpret_cast<void*>(va + done);
      void* h = static_cast<char*>(host[piece].first) + in_piece;
      out.push_back(to_host ? Copy{h, dev, n} : Copy{dev, h, n});
      done += n;
      in_piece += n;
      if (in_piece == host[piece].second) {
        ++piece;
        in_piece = 0;
      }
    }
  }
  return out;
}

std::size_t sleep_segment_size(const SleepPool& sp, bool small, std::size_t size,
                               std::size_t allocation_size_for_request, std::size_t gran) {
  if (small) return round_up(allocation_size_for_request, gran);
  // Half the pool (power of two, clamped), or the allocator's usual segment when that is
  // bigger, cut down to whole copies of this request: pools of equal-sized tensors (layers,
  // KV blocks) then leave no tail in their segments but the granularity rounding.
  std::size_t target = std::max<std::size_t>(allocation_size_for_request, size);
  const std::size_t half = sp.large_bytes / 2;
  const std::size_t grow =
      half == 0 ? kSleepMinGrow
                : std::clamp<std::size_t>(std::size_t(1) << (63 - __builtin_clzll(half)),
                                          kSleepMinGrow, kSleepMaxGrow);
  target = std::max(target, grow);
  const std::size_t whole = std::max<std::size_t>(1, target / std::max<std::size_t>(size, 1));
  return round_up(whole * size, gran);
}

std::size_t sleep_max_chunk(std::size_t total, std::size_t gran) {
  std::size_t cap = kSleepMaxChunk;
  if (total / 2 > 0) cap = std::min(cap, std::size_t(1) << (63 - __builtin_clzll(total / 2)));
  return std::max(gran, cap / gran * gran);
}

std::vector<std::size_t> sleep_chunk_sizes(std::size_t bytes, std::size_t gran,
                                           std::size_t max_chunk) {
  std::vector<std::size_t> out;
  max_chunk = std::max(gran, max_chunk / gran * gran);
  for (std::size_t at = 0; at < bytes; at += out.back()) out.push_back(std::min(max_chunk, bytes - at));
  return out;
}

std::uintptr_t sleep_take_va(SleepPool& sp, detail::MemoryOps& b, std::size_t bytes,
                             std::size_t reserve_bytes) {
  for (auto& r : sp.reservations) {
    for (auto it = r.free.begin(); it != r.free.end(); ++it) {  // first fit: the pool stays dense
      if (it->second < bytes) continue;
      const std::uintptr_t va = it->first;
      const std::size_t left = it->second - bytes;
      r.free.erase(it);
      if (left) r.free.emplace(va + bytes, left);
      return va;
    }
  }
  const std::size_t want = std::max(reserve_bytes, bytes);
  const std::uintptr_t va = b.vm_reserve(sp.device, want);
  if (!va) return 0;
  SleepPool::Reservation r;
  r.va = va;
  r.bytes = want;
  if (want > bytes) r.free.emplace(va + bytes, want - bytes);
  sp.reservations.push_back(std::move(r));
  return va;
}

void sleep_give_va(SleepPool& sp, std::uintptr_t va, std::size_t bytes) {
  for (auto& r : sp.reservations) {
    if (va < r.va || va >= r.va + r.bytes) continue;
    auto next = r.free.lower_bound(va);
    if (next != r.free.end() && next->first == va + bytes) {  // merge with the range after
      bytes += next->second;
      next = r.free.erase(next);
    }
    if (next != r.free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == va) {  // and the one before
        prev->second += bytes;
        return;
      }
    }
    r.free.emplace(va, bytes);
    return;
  }
}

// ---- DeviceAllocator: tagged pools ----

void DeviceAllocator::create_sleep_pool(SleepPool* sp) {
  create_pool(sp->id, /*no_split=*/false, /*use_on_oom=*/false);
  Locked lock(*this);
  pools_.at(sp->id)->sleep = sp;
}

PrivatePool* DeviceAllocator::private_pool_of(const SleepPool& sp) {
  auto it = pools_.find(sp.id);
  return it == pools_.end() ? nullptr : it->second.get();
}

void DeviceAllocator::check_pool_awake(BlockPool& pool, std::size_t size) {
  if (!pool.owner || !pool.owner->sleep) return;
  const SleepPool& sp = *pool.owner->sleep;
  if (sp.state == SleepPool::State::awake) return;
  throw Error("cannot allocate " + std::to_string(size) + " bytes from sleep pool " +
              quoted(sp.tag) + " on device " + std::to_string(device_) + ": the pool is " +
              (sp.state == SleepPool::State::waking ? "waking up" : "asleep") +
              " (its memory is released); call cudakit.memory.wake_up([" + quoted(sp.tag) +
              "]) first, or allocate outside use_sleep_pool(" + quoted(sp.tag) + ")");
}

Block* DeviceAllocator::alloc_sleep_segment(BlockPool& pool, std::size_t size,
                                            detail::StreamHandle stream) {
  SleepPool& sp = *pool.owner->sleep;
  const std::size_t gran = std::max<std::size_t>(memory_.vm_granularity(device_), 1);
  // The grown size first, then the request's own size when the device (or the memory
  // fraction) cannot hold the grown one: growth must not turn into an out-of-memory error.
  const std::size_t minimal = round_up(std::max(allocation_size(size), size), gran);
  const std::size_t grown =
      sleep_segment_size(sp, pool.is_small, size, allocation_size(size), gran);
  // Graph capture may grow a pool (as alloc_segment): the VM calls do not enqueue work.
  detail::ThreadCaptureModeGuard relaxed(graphs_, detail::CaptureMode::relaxed);
  const std::size_t reserve = round_up(std::min(total_memory_, kMaxReservation), gran);
  SleepSegment seg;
  std::uintptr_t va = 0;
  for (const std::size_t seg_bytes : {grown, minimal}) {
    if (seg_bytes != grown && seg_bytes >= grown) break;  // nothing smaller to try
    if (seg_bytes > total_memory_ || would_exceed_limit(seg_bytes)) continue;
    va = sleep_take_va(sp, memory_, seg_bytes, reserve);
    if (!va) return nullptr;
    seg = SleepSegment{};
    seg.va = va;
    seg.bytes = seg_bytes;
    seg.small = pool.is_small;
    seg.sizes = sleep_chunk_sizes(seg_bytes, gran, sleep_max_chunk(total_memory_, gran));
    bool mapped = false;
    try {
      mapped = map_sleep_segment(seg);
    } catch (...) {
      sleep_give_va(sp, va, seg_bytes);
      throw;
    }
    if (mapped) break;
    sleep_give_va(sp, va, seg_bytes);
    va = 0;
  }
  if (!va) return nullptr;
  const std::size_t seg_bytes = seg.bytes;
  Block* b = new_block();
  b->ptr = va;
  b->size = seg_bytes;
  b->stream = stream;
  b->pool = &pool;
  b->segment_id = next_segment_id_++;
  segment_heads_.insert(b);
  sp.segments.emplace(va, std::move(seg));
  sp.bytes += seg_bytes;
  if (!pool.is_small) sp.large_bytes += seg_bytes;
  stats_.segment_created(pool.is_small, seg_bytes, oversize(seg_bytes));
  if (allocator_events_wanted()) note_event("segment_alloc", b->ptr, seg_bytes, stream, nullptr);
  return b;
}

bool DeviceAllocator::map_sleep_segment(SleepSegment& seg) {
  // Creates every chunk, then maps the range with one call (one access grant on the GPU).
  // Out of memory or a driver error: nothing stays created or mapped.
  std::vector<detail::PhysMemHandle> handles;
  handles.reserve(seg.sizes.size());
  auto destroy_all = [&] {
    for (detail::PhysMemHandle h : handles) {
      try {
        memory_.vm_destroy(h);
      } catch (...) {  // the first error is the one reported
      }
    }
  };
  try {
    for (std::size_t n : seg.sizes) {
      const detail::PhysMemHandle h = memory_.vm_create(device_, n);
      if (!h) {
        destroy_all();
        return false;
      }
      handles.push_back(h);
    }
    memory_.vm_map_chunks(seg.va, seg.sizes.data(), handles.data(), handles.size(), device_);
  } catch (...) {
    destroy_all();
    throw;
  }
  seg.handles = std::move(handles);
  seg.fds.assign(seg.sizes.size(), -1);
  return true;
}

bool DeviceAllocator::unmap_sleep_segment(SleepSegment& seg, std::exception_ptr* error) {
  // Chunk by chunk: cuMemUnmap takes whole mappings. Every call is tried; the first error
  // is kept for the caller.
  bool ok = true;
  auto attempt = [&](auto&& f) {
    try {
      f();
    } catch (...) {
      ok = false;
      if (error && !*error) *error = std::current_exception();
    }
  };
  std::uintptr_t at = seg.va;
  for (std::size_t i = 0; i < seg.handles.size(); ++i) {
    attempt([&] { memory_.vm_unmap(at, seg.sizes[i]); });
    at += seg.sizes[i];
  }
  for (detail::PhysMemHandle h : seg.handles) attempt([&] { memory_.vm_destroy(h); });
  for (int fd : seg.fds)
    if (fd >= 0) ::close(fd);
  seg.handles.clear();
  seg.fds.clear();
  return ok;
}

std::size_t DeviceAllocator::sleep_pool(SleepPool& sp, bool offload, detail::StreamHandle stream) {
  std::vector<SleepSegment*> segs;
  std::vector<std::pair<std::uintptr_t, std::size_t>> runs;
  {
    Locked lock(*this);
    if (sp.state != SleepPool::State::awake) return 0;
    PrivatePool* pp = private_pool_of(sp);
    for (auto& [va, seg] : sp.segments) segs.push_back(&seg);
    if (offload && pp) {
      // The allocated blocks, merged into address-ordered runs: only they hold contents.
      for (Block* head : segment_heads_) {
        if (head->pool->owner != pp) continue;
        for (const Block* b = head; b; b = b->next) {
          if (!b->allocated) continue;
          if (!runs.empty() && runs.back().first + runs.back().second == b->ptr)
            runs.back().second += b->size;
          else
            runs.emplace_back(b->ptr, b->size);
        }
      }
      std::sort(runs.begin(), runs.end());
    }
    sp.state = SleepPool::State::sleeping;  // freezes the segment set (sleep_pool.hpp)
  }
  std::vector<std::pair<void*, std::size_t>> host;
  std::size_t host_bytes = 0;
  try {
    WaitScope wait;
    // Work on any stream may still read or write the pool.
    devices_.device_synchronize(device_);
    if (!runs.empty()) {
      std::size_t total = 0;
      for (const auto& r : runs) total += r.second;
      for (std::size_t at = 0; at < total; at += host.back().second) {
        const std::size_t n = std::min(kSleepHostPiece, total - at);
        host.emplace_back(host_allocator().allocate(n), n);
      }
      host_bytes = total;
      for (const SleepCopy& c : sleep_plan_copies(runs, host, /*to_host=*/true))
        memory_.memcpy_async(c.dst, c.src, c.bytes, stream);
      streams_.stream_synchronize(stream);
    }
  } catch (...) {
    free_host(host);
    Locked lock(*this);
    sp.state = SleepPool::State::awake;
    throw;
  }
  // The physical memory goes now. A failing driver call leaves the pool asleep (its chunks
  // are gone or unusable either way) and is reported after the state is consistent.
  std::exception_ptr error;
  std::size_t released = 0, released_small = 0, chunks_small = 0, chunks_large = 0;
  {
    WaitScope wait;
    for (SleepSegment* seg : segs) {
      (seg->small ? chunks_small : chunks_large) += seg->handles.size();
      unmap_sleep_segment(*seg, &error);
      released += seg->bytes;
      if (seg->small) released_small += seg->bytes;
    }
  }
  Locked lock(*this);
  stats_.pages_unmapped(true, released_small, chunks_small);
  stats_.pages_unmapped(false, released - released_small, chunks_large);
  sp.runs = std::move(runs);
  sp.host = std::move(host);
  sp.host_bytes = host_bytes;
  sp.offloaded = offload;
  sp.state = SleepPool::State::asleep;
  ++sp.num_sleeps;
  lock.unlock();
  if (error) std::rethrow_exception(error);
  return released;
}

void DeviceAllocator::wake_pool(SleepPool& sp, detail::StreamHandle stream) {
  std::vector<SleepSegment*> segs;
  {
    Locked lock(*this);
    if (sp.state != SleepPool::State::asleep) return;
    for (auto& [va, seg] : sp.segments) segs.push_back(&seg);
    sp.state = SleepPool::State::waking;
  }
  std::size_t mapped = 0;
  bool retried = false;
  auto back_to_sleep = [&] {
    for (std::size_t i = 0; i < mapped; ++i) unmap_sleep_segment(*segs[i], nullptr);
    Locked lock(*this);
    sp.state = SleepPool::State::asleep;
  };
  try {
    while (mapped < segs.size()) {
      if (map_sleep_segment(*segs[mapped])) {
        ++mapped;
        continue;
      }
      if (!retried) {
        // The cache of other pools may hold the memory this pool gave up: release it once.
        retried = true;
        empty_cache();
        continue;
      }
      std::size_t need = 0;
      for (std::size_t i = mapped; i < segs.size(); ++i) need += segs[i]->bytes;
      detail::MemInfo mi = devices_.mem_get_info(device_);
      throw OutOfMemoryError(
          "CUDA out of memory: wake_up of sleep pool " + quoted(sp.tag) + " on device " +
              std::to_string(device_) + " needs " + std::to_string(need) +
              " more bytes, and the device has " + std::to_string(mi.free) +
              " free after cudakit released its cache. The pool stays asleep" +
              (sp.offloaded ? " with its contents offloaded" : "") +
              ": free memory (or put other pools to sleep) and call wake_up again",
          device_, need, mi.free, mi.total);
    }
    if (sp.offloaded && !sp.runs.empty()) {
      WaitScope wait;
      for (const SleepCopy& c : sleep_plan_copies(sp.runs, sp.host, /*to_host=*/false))
        memory_.memcpy_async(c.dst, c.src, c.bytes, stream);
      // Returns after the copies (sleep_pool.hpp: any stream may use the memory at once).
      streams_.stream_synchronize(stream);
    }
  } catch (...) {
    back_to_sleep();
    throw;
  }
  free_host(sp.host);
  std::size_t small = 0, total = 0, chunks_small = 0, chunks_large = 0;
  for (SleepSegment* seg : segs) {
    total += seg->bytes;
    if (seg->small) small += seg->bytes;
    (seg->small ? chunks_small : chunks_large) += seg->handles.size();
  }
  Locked lock(*this);
  stats_.pages_mapped(true, small, chunks_small);
  stats_.pages_mapped(false, total - small, chunks_large);
  sp.runs.clear();
  sp.host_bytes = 0;
  sp.offloaded = false;
  sp.state = SleepPool::State::awake;
  ++sp.num_wake_ups;
}

DeviceAllocator::SleepInfo DeviceAllocator::sleep_info(SleepPool& sp) {
  Locked lock(*this);
  SleepInfo out;
  out.bytes = sp.bytes;
  out.asleep = sp.state == SleepPool::State::asleep;
  out.offloaded = sp.offloaded;
  if (PrivatePool* pp = private_pool_of(sp)) {
    for (Block* head : segment_heads_) {
      if (head->pool->owner != pp) continue;
      for (const Block* b = head; b; b = b->next)
        if (b->allocated) out.allocated += b->size;
    }
  }
  return out;
}

// ---- registry ----

namespace {
struct Registry {
  std::mutex mu;  // the map (never held while calling into an allocator)
  std::map<std::pair<std::string, int>, std::unique_ptr<SleepPool>> pools;
  std::mutex op;  // sleep / wake_up / sleep_state / export (sleep_pool.hpp)
};
Registry& registry() {
  static auto* r = new Registry();  // leaked: pools outlive static destruction
  return *r;
}

SleepPool& pool_for(const std::string& tag, int device) {
  Registry& r = registry();
  {
    std::lock_guard lock(r.mu);
    auto it = r.pools.find({tag, device});
    if (it != r.pools.end()) return *it->second;
  }
  // Created under a mutex of its own so that two first uses of a tag make one pool; the
  // registry mutex is not held while the allocator's locks are taken.
  static std::mutex create_mu;
  std::lock_guard create(create_mu);
  {
    std::lock_guard lock(r.mu);
    auto it = r.pools.find({tag, device});
    if (it != r.pools.end()) return *it->second;
  }
  auto sp = std::make_unique<SleepPool>(tag, device, new_user_pool_id());
  device_allocator(device).create_sleep_pool(sp.get());
  std::lock_guard lock(r.mu);
  return *r.pools.emplace(std::make_pair(tag, device), std::move(sp)).first->second;
}

// The pools of `tags` (nullopt: all), in (tag, device) order. KeyError for an unknown tag.
std::vector<SleepPool*> pools_of(const std::optional<std::vector<std::string>>& tags,
                                 const char* fn) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<SleepPool*> out;
  if (!tags) {
    for (auto& [key, sp] : r.pools) out.push_back(sp.get());
    return out;
  }
  for (const std::string& tag : *tags) {
    auto it = r.pools.lower_bound({tag, -1});
    if (it == r.pools.end() || it->first.first != tag) {
      std::string known;
      for (auto& [key, sp] : r.pools)
        if (known.find(quoted(key.first)) == std::string::npos)
          known += (known.empty() ? "" : ", ") + quoted(key.first);
      throw KeyError(std::string(fn) + ": unknown sleep-pool tag " + quoted(tag) +
                     " (tags are made by allocating inside use_sleep_pool(tag); known: " +
                     (known.empty() ? "none" : known) + ")");
    }
    for (; it != r.pools.end() && it->first.first == tag; ++it)
      if (std::find(out.begin(), out.end(), it->second.get()) == out.end())
        out.push_back(it->second.get());
  }
  return out;
}
}  // namespace

SleepPool* find_sleep_pool(const std::string& tag, int device) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.pools.find({tag, device});
  return it == r.pools.end() ? nullptr : it->second.get();
}

std::mutex& sleep_op_mutex() { return registry().op; }

}  // namespace cudakit::memory

namespace cudakit {

UseSleepPool::UseSleepPool(const std::string& tag, int device)
    : device_(memory::resolve_alloc_device(device)) {
  if (tag.empty())
    throw ValueError("use_sleep_pool: the tag is empty: pass a name such as \"weights\" or "
                     "\"kv_cache\"");
  if (memory::settings_in_force().backend == memory::AllocatorConfig::Backend::driver_async)
    throw NotSupportedError(
        "use_sleep_pool: tagged pools need cudakit's native allocator, and this process runs "
        "backend:cudaMallocAsync (the driver's pool cannot release memory at fixed "
        "addresses): set CUDAKIT_ALLOC_CONF=backend:native");
  memory::SleepPool& sp = memory::pool_for(tag, device_);
  id_ = sp.id;
  const auto tid = std::this_thread::get_id();
  memory::device_allocator(device_).begin_allocate_to_pool(
      id_, [tid](detail::StreamHandle) { return std::this_thread::get_id() == tid; });
}

UseSleepPool::~UseSleepPool() {
  try {
    memory::device_allocator(device_).end_allocate_to_pool(id_);
  } catch (...) {
  }
}

std::size_t sleep(const std::optional<std::vector<std::string>>& tags,
                  const std::vector<std::string>& offload) {
  auto pools = memory::pools_of(tags, "sleep");
  memory::pools_of(offload, "sleep (offload)");  // KeyError for an unknown offload tag
  if (tags) {
    for (const std::string& t : offload)
      if (std::find(tags->begin(), tags->end(), t) == tags->end())
        throw ValueError("sleep: offload tag '" + t + "' is not among the tags put to sleep: "
                         "add it to `tags` (or pass tags=None to put every pool to sleep)");
  }
  memory::drain_deferred_frees();
  std::lock_guard op(memory::sleep_op_mutex());
  std::size_t released = 0;
  for (memory::SleepPool* sp : pools) {
    const bool off = std::find(offload.begin(), offload.end(), sp->tag) != offload.end();
    released += memory::device_allocator(sp->device)
                    .sleep_pool(*sp, off, current_stream(sp->device).handle());
  }
  return released;
}

void wake_up(const std::optional<std::vector<std::string>>& tags) {
  auto pools = memory::pools_of(tags, "wake_up");
  std::lock_guard op(memory::sleep_op_mutex());
  for (memory::SleepPool* sp : pools)
    memory::device_allocator(sp->device).wake_pool(*sp, current_stream(sp->device).handle());
}

std::map<std::string, SleepPoolState> sleep_state() {
  auto pools = memory::pools_of(std::nullopt, "sleep_state");
  std::lock_guard op(memory::sleep_op_mutex());
  std::map<std::string, SleepPoolState> out;
  for (memory::SleepPool* sp : pools) {
    const auto info = memory::device_allocator(sp->device).sleep_info(*sp);
    auto [it, first] = out.try_emplace(sp->tag);
    SleepPoolState& s = it->second;
    s.bytes += info.bytes;
    s.allocated_bytes += info.allocated;
    // A tag on several devices: asleep / offloaded when all its pools are.
    s.asleep = first ? info.asleep : s.asleep && info.asleep;
    s.offloaded = first ? info.offloaded : s.offloaded && info.offloaded;
  }
  return out;
}

}  // namespace cudakit
