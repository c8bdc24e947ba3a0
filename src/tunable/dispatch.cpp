#include "tunable/dispatch.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "backend/graph_ops.hpp"
#include "backend/math_ops.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "tunable/candidates.hpp"
#include "tunable/results.hpp"
#include "tunable/settings.hpp"
#include "tunable/signature.hpp"
#include "tunable/tuner.hpp"

namespace cudakit::tunable::detail {
namespace {

using cudakit::detail::graph_ops;
using cudakit::detail::math_ops;

struct CacheSlot {
  GemmKey key;
  std::uint64_t generation;  // 0: empty (generations start at 1)
  const GemmPlan* plan;
};
constexpr std::size_t kCacheSlots = 128;

// The calling thread's cache. A trivially destructible pointer, so the hot path reads it
// without a TLS guard; the slots live on the heap because libcudakit.so is dlopen'ed (by
// Python) and the static TLS block has no room for 7 KiB per thread.
thread_local CacheSlot* t_slots = nullptr;
CacheSlot* cache() {
  if (t_slots) [[likely]] return t_slots;
  struct Owner {
    CacheSlot* slots = nullptr;
    ~Owner() { delete[] slots; }
  };
  thread_local Owner owner;  // frees the slots when the thread exits
  owner.slots = new CacheSlot[kCacheSlots]();
  return t_slots = owner.slots;
}

// Every plan the caches may point to, kept for the process. Key: the problem key's bytes +
// the solution name.
std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, GemmPlanPtr>& registry() {
  static auto* r = new std::map<std::string, GemmPlanPtr>();
  return *r;
}

const GemmPlan* keep(const GemmKey& key, GemmPlanPtr plan) {
  if (plan->name() == kDefaultSolution) return &default_plan(key.device);  // static, shared
  std::string id(reinterpret_cast<const char*>(&key), sizeof key);
  id += plan->name();
  std::lock_guard<std::mutex> l(registry_mutex());
  auto it = registry().emplace(std::move(id), std::move(plan)).first;  // an earlier one wins
  return it->second.get();
}

void run_plan(const GemmPlan& plan, int device, cudakit::detail::StreamHandle s,
              const GemmArgs& g) {
  if (const std::size_t bytes = plan.workspace_bytes()) {
    // Freed right after the launch is queued: the caching allocator reuses it only in the
    // order of `s`, after this product.
    Allocation ws = allocate_device(bytes, device, StreamRef::from_handle(s, device));
    plan.run(s, g, ws.get());
    return;
  }
  plan.run(s, g, nullptr);
}

// Solutions already reported as not runnable here (one warning each).
std::mutex& reported_mutex() {
  static std::mutex mu;
  return mu;
}
std::set<std::string>& reported() {
  static auto* seen = new std::set<std::string>();
  return *seen;
}

void report_unusable(const std::string& solution, const std::string& sig) {
  {
    std::lock_guard<std::mutex> l(reported_mutex());
    if (!reported().insert(solution).second) return;
  }
  warn("recorded solution '" + solution + "' for " + sig +
       " cannot run here (another GPU, library version or operand alignment): Default runs "
       "instead");
}

// The slow path. `cacheable` is cleared when the answer must not be remembered.
const GemmPlan* resolve(int device, cudakit::detail::StreamHandle s, const GemmArgs& g,
                        const GemmKey& key, bool& cacheable) {
  Settings& st = settings();
  ResultsStore& rs = store();
  rs.ensure_initialized();
  const std::string op = op_signature(g), params = params_signature(g);
  if (std::optional<ResultEntry> e = rs.lookup(op, params)) {
    if (GemmPlanPtr p = plan_for(device, g, e->solution)) return keep(key, std::move(p));
    report_unusable(e->solution, op + "(" + params + ")");
    return &default_plan(device);
  }
  const bool capturing = graph_ops().stream_capture_status(s, nullptr) ==
                         cudakit::detail::CaptureStatus::active;
  if (st.tuning()) {
    if (capturing) {  // no timing inside a capture: Default now, tuned after it
      cacheable = false;
      return &default_plan(device);
    }
    DeviceGuard on(device);
    std::unique_lock<std::mutex> serial = tuning_lock();
    if (std::optional<ResultEntry> e = rs.lookup(op, params)) {  // tuned meanwhile by another thread
      if (GemmPlanPtr p = plan_for(device, g, e->solution)) return keep(key, std::move(p));
      return &default_plan(device);
    }
    std::optional<TuneOutcome> best = find_fastest(device, s, g);
    if (!best) {
      cacheable = false;
      return &default_plan(device);
    }
    rs.add(op, params, ResultEntry{best->plan->name(), best->time_ms});
    return keep(key, std::move(best->plan));
  }
  if (st.record_untuned() && !capturing) rs.record_untuned(op, params, device);
  return &default_plan(device);
}

}  // namespace

void gemm(int device, cudakit::detail::StreamHandle s, GemmArgs g) {
  Settings& st = settings();
  if (!st.enabled()) {
    math_ops().gemm(device, s, std::move(g));
    return;
  }
  const GemmKey key = GemmKey::of(device, g);
  const std::uint64_t generation = st.generation();
  CacheSlot& slot = cache()[key.hash() % kCacheSlots];
  if (slot.generation == generation && slot.key == key) [[likely]] {
    run_plan(*slot.plan, device, s, g);
    return;
  }
  bool cacheable = true;
  const GemmPlan* plan = resolve(device, s, g, key, cacheable);
  if (cacheable) slot = CacheSlot{key, generation, plan};
  run_plan(*plan, device, s, g);
}

void reset_dispatch_for_testing() {
  {
    std::lock_guard<std::mutex> l(reported_mutex());
    reported().clear();
  }
  std::fill(cache(), cache() + kCacheSlots, CacheSlot{});
  settings().bump_generation();
}

}  // namespace cudakit::tunable::detail
