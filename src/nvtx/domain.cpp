// Domains and their categories. Registration paths take a lock; nothing here is on the
// range/mark hot path except Domain::global(), a function-local static.
//
// Domains are never destroyed: a tool may hold the handle until the process ends, and ranges
// can be open when static destructors run. Objects are leaked on purpose (exit-safe).
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "cudakit/error.hpp"
#include "nvtx/nvtx_c.hpp"

namespace cudakit::nvtx {

struct Domain::Categories {
  std::mutex mu;
  std::map<std::string, std::uint32_t, std::less<>> by_name;
  std::set<std::uint32_t> used;
  std::uint32_t next = 1;  // 0 means "no category" to NVTX
};

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, Domain*, std::less<>> by_name;
  int next_slot = 1;  // slot 0 is the global domain
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: see the file comment
  return *r;
}

void announce_category(const Domain& d, std::uint32_t id, const std::string& name) {
#if CUDAKIT_WITH_NVTX
  if (!d.name().empty()) {
    nvtxDomainNameCategoryA(detail::handle_of(d), id, name.c_str());
  } else {
    nvtxNameCategoryA(id, name.c_str());
  }
#else
  (void)d;
  (void)id;
  (void)name;
#endif
}

}  // namespace

Domain::Domain(std::string name, int slot)
    : name_(std::move(name)), slot_(slot), categories_(std::make_unique<Categories>()) {
  if (name_.empty()) created_.store(true, std::memory_order_release);  // global: no handle
}

void* Domain::create_handle() const noexcept {
  // Once per domain, under one process-wide lock (first uses only; not the categories' lock,
  // which category() holds while announcing a name through this handle).
  static std::mutex* create_mu = new std::mutex();  // leaked: exit-safe
  std::lock_guard lock(*create_mu);
  if (!created_.load(std::memory_order_relaxed)) {
#if CUDAKIT_WITH_NVTX
    handle_ = nvtxDomainCreateA(name_.c_str());
#endif
    created_.store(true, std::memory_order_release);
  }
  return handle_;
}

Domain::~Domain() = default;

Domain& Domain::global() noexcept {
  static Domain* d = new Domain("", 0);
  return *d;
}

Domain& Domain::cudakit() noexcept {
  static Domain* d = &get("cudakit");
  return *d;
}

Domain& Domain::get(std::string_view name) {
  if (name.empty()) {
    throw ValueError(
        "nvtx Domain: name must be a non-empty string (the default domain is "
        "Domain::global())");
  }
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (auto it = r.by_name.find(name); it != r.by_name.end()) return *it->second;
  auto* d = new Domain(std::string(name), r.next_slot++);
  r.by_name.emplace(d->name_, d);
  return *d;
}

std::uint32_t Domain::category(std::string_view name) {
  if (name.empty()) throw ValueError("nvtx category: name must be a non-empty string");
  Categories& c = *categories_;
  std::lock_guard lock(c.mu);
  if (auto it = c.by_name.find(name); it != c.by_name.end()) return it->second;
  while (c.used.count(c.next)) ++c.next;
  std::uint32_t id = c.next++;
  c.used.insert(id);
  auto it = c.by_name.emplace(std::string(name), id).first;
  announce_category(*this, id, it->first);
  return id;
}

void Domain::name_category(std::uint32_t id, std::string_view name) {
  if (id == 0) {
    throw ValueError("nvtx name_category: id 0 means 'no category'; use an id from 1 to 2**32-1");
  }
  if (name.empty()) throw ValueError("nvtx name_category: name must be a non-empty string");
  Categories& c = *categories_;
  std::lock_guard lock(c.mu);
  c.used.insert(id);
  auto it = c.by_name.insert_or_assign(std::string(name), id).first;
  announce_category(*this, id, it->first);
}

}  // namespace cudakit::nvtx
