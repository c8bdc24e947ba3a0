// Global graph lifecycle hooks and HookHandle (hooks.hpp).
#include "graphs/hooks.hpp"

#include "cudakit/error.hpp"

namespace cudakit {
namespace graphs::detail {

std::uint64_t next_hook_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

GlobalHooks& global_hooks() noexcept {
  static GlobalHooks* hooks = new GlobalHooks();  // leaked on purpose (see hooks.hpp)
  return *hooks;
}

}  // namespace graphs::detail

void HookHandle::remove() noexcept {
  if (auto r = registry_.lock()) r->remove(id_);
}

bool HookHandle::registered() const noexcept {
  auto r = registry_.lock();
  return r && r->contains(id_);
}

namespace {
template <class Fn>
HookHandle add_global(const std::shared_ptr<graphs::detail::HookList<Fn>>& list, Fn fn,
                      const char* what) {
  if (!fn) throw ValueError(std::string(what) + ": the hook is empty");
  return HookHandle(list, list->add(std::move(fn)));
}
}  // namespace

HookHandle register_graph_capture_start_hook(GraphHook fn) {
  return add_global(graphs::detail::global_hooks().capture_start, std::move(fn),
                    "register_graph_capture_start_hook");
}
HookHandle register_graph_capture_end_hook(GraphHook fn) {
  return add_global(graphs::detail::global_hooks().capture_end, std::move(fn),
                    "register_graph_capture_end_hook");
}
HookHandle register_graph_instantiate_hook(GraphHook fn) {
  return add_global(graphs::detail::global_hooks().instantiate, std::move(fn),
                    "register_graph_instantiate_hook");
}
HookHandle register_graph_replay_start_hook(GraphHook fn) {
  return add_global(graphs::detail::global_hooks().replay_start, std::move(fn),
                    "register_graph_replay_start_hook");
}
HookHandle register_graph_replay_end_hook(GraphHook fn) {
  return add_global(graphs::detail::global_hooks().replay_end, std::move(fn),
                    "register_graph_replay_end_hook");
}
HookHandle register_graph_destroy_hook(GraphDestroyHook fn) {
  return add_global(graphs::detail::global_hooks().destroy, std::move(fn),
                    "register_graph_destroy_hook");
}

}  // namespace cudakit
