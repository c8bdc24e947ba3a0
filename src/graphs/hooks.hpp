// Hook lists behind the graph lifecycle hooks, destroy callbacks and retained objects.
//
// Copy-on-write: the list is an immutable vector behind a shared_ptr, replaced on every
// registration/removal under a mutex; firing takes a snapshot (one shared_ptr copy) and calls
// outside the lock, so hooks may register or remove hooks (themselves included) while
// firing. `size_` is kept in a relaxed atomic so the replay fast path asks "any hooks?"
// without the mutex. Rejected: a mutex held while firing (a hook that removes itself would
// deadlock) and a std::vector copy per fire (allocates on the replay path).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cudakit/graphs.hpp"

namespace cudakit::graphs::detail {

std::uint64_t next_hook_id() noexcept;

template <class Fn>
class HookList final : public HookRegistryBase {
 public:
  using Entry = std::pair<std::uint64_t, Fn>;
  using Items = std::vector<Entry>;
  using Snapshot = std::shared_ptr<const Items>;

  std::uint64_t add(Fn fn) {
    const std::uint64_t id = next_hook_id();
    std::lock_guard lock(mu_);
    auto next = items_ ? std::make_shared<Items>(*items_) : std::make_shared<Items>();
    next->emplace_back(id, std::move(fn));
    size_.store(next->size(), std::memory_order_relaxed);
    items_ = std::move(next);
    return id;
  }

  void remove(std::uint64_t id) noexcept override {
    Snapshot old;  // destroyed after the lock is released (a callable's destructor may
                   // run arbitrary code, e.g. a Python decref)
    try {
      std::lock_guard lock(mu_);
      if (!items_) return;
      auto next = std::make_shared<Items>();
      for (const Entry& e : *items_) {
        if (e.first != id) next->push_back(e);
      }
      if (next->size() == items_->size()) return;
      size_.store(next->size(), std::memory_order_relaxed);
      old = std::exchange(items_, next->empty() ? nullptr : Snapshot(std::move(next)));
    } catch (...) {  // allocation failure: the hook stays registered
    }
  }

  bool contains(std::uint64_t id) const noexcept override {
    std::lock_guard lock(mu_);
    if (!items_) return false;
    for (const Entry& e : *items_) {
      if (e.first == id) return true;
    }
    return false;
  }

  bool empty() const noexcept { return size_.load(std::memory_order_relaxed) == 0; }

  Snapshot snapshot() const {
    std::lock_guard lock(mu_);
    return items_;
  }

  // Empties the list and returns what it held (destroy callbacks fire once per cycle).
  Snapshot take() noexcept {
    std::lock_guard lock(mu_);
    size_.store(0, std::memory_order_relaxed);
    return std::exchange(items_, nullptr);
  }

 private:
  mutable std::mutex mu_;
  Snapshot items_;
  std::atomic<std::size_t> size_{0};
};

using GraphHookList = HookList<GraphHook>;

// The process-wide lists (leaked: hooks may be called until exit, and their callables may
// be Python objects that must not be destroyed after the interpreter).
struct GlobalHooks {
  std::shared_ptr<GraphHookList> capture_start = std::make_shared<GraphHookList>();
  std::shared_ptr<GraphHookList> capture_end = std::make_shared<GraphHookList>();
  std::shared_ptr<GraphHookList> instantiate = std::make_shared<GraphHookList>();
  std::shared_ptr<GraphHookList> replay_start = std::make_shared<GraphHookList>();
  std::shared_ptr<GraphHookList> replay_end = std::make_shared<GraphHookList>();
  std::shared_ptr<HookList<GraphDestroyHook>> destroy =
      std::make_shared<HookList<GraphDestroyHook>>();
};
GlobalHooks& global_hooks() noexcept;

// Calls every hook of `list` with `args`; exceptions propagate (per-graph hooks).
template <class Fn, class... Args>
void fire(const HookList<Fn>& list, Args&... args) {
  if (list.empty()) return;
  auto snap = list.snapshot();
  if (!snap) return;
  for (const auto& e : *snap) e.second(args...);
}

// Same, swallowing each hook's exception so the others still run (global hooks, destroy).
template <class Fn, class... Args>
void fire_swallow(const HookList<Fn>& list, Args&... args) noexcept {
  if (list.empty()) return;
  typename HookList<Fn>::Snapshot snap;
  try {
    snap = list.snapshot();
  } catch (...) {
    return;
  }
  if (!snap) return;
  for (const auto& e : *snap) {
    try {
      e.second(args...);
    } catch (...) {
    }
  }
}

}  // namespace cudakit::graphs::detail
