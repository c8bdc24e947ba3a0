// is_available, the CUDAKIT_GDS policy, and the registry of buffers registered for GDS.
//
// The registry keeps each registered tensor's storage alive until it is deregistered: cuFile
// must never see memory freed (and possibly reused by the caching allocator) while it holds a
// registration, and torch's API gives the caller no other way to keep that promise.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "backend/gds_ops.hpp"
#include "cudakit/error.hpp"
#include "cudakit/gds.hpp"
#include "gds/policy.hpp"

namespace cudakit::gds {

Policy parse_policy(const char* text) {
  std::string s = text ? text : "";
  if (s.empty() || s == "auto") return Policy::automatic;
  if (s == "compat") return Policy::compat;
  if (s == "gds") return Policy::gds;
  throw ValueError("CUDAKIT_GDS='" + s + "' is not one of 'auto', 'compat', 'gds'");
}

Policy policy_from_env() { return parse_policy(std::getenv("CUDAKIT_GDS")); }

bool is_available() noexcept {
  try {
    return detail::gds_ops().gds_status().available;
  } catch (...) {
    return false;
  }
}

std::string unavailable_reason() noexcept {
  try {
    return detail::gds_ops().gds_status().reason;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown";
  }
}

const char* io_path_name(IoPath path) noexcept { return path == IoPath::gds ? "gds" : "compat"; }

namespace {

struct Registered {
  std::size_t bytes = 0;
  std::shared_ptr<Storage> keep;
  int device = 0;
  bool with_cufile = false;
};

struct Registry {
  std::mutex mu;
  std::map<const void*, Registered> buffers;
};

Registry& registry() {
  static auto* r = new Registry();  // leaked: registrations may outlive static destruction
  return *r;
}

void* checked_buffer(const Tensor& t, const char* what) {
  if (!t.defined()) throw ValueError(std::string(what) + ": the tensor is undefined");
  if (!t.is_cuda()) {
    throw ValueError(std::string(what) + ": the tensor is on " + t.device().str() +
                     "; only device (cuda) memory is registered for GDS");
  }
  if (t.nbytes() == 0) throw ValueError(std::string(what) + ": the tensor is empty");
  if (!t.is_contiguous()) {
    throw ValueError(std::string(what) + ": the tensor is not contiguous: register a "
                     "contiguous tensor");
  }
  return t.data_ptr();
}

std::string hex(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%zx", reinterpret_cast<std::size_t>(p));
  return b;
}

}  // namespace

void register_buffer(const Tensor& t) {
  void* ptr = checked_buffer(t, "gds_register_buffer");
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (r.buffers.count(ptr)) {
    throw ValueError("gds_register_buffer: the memory at " + hex(ptr) +
                     " is already registered (gds_deregister_buffer releases it)");
  }
  Registered entry;
  entry.bytes = t.nbytes();
  entry.keep = t.storage();
  entry.device = t.device().index;
  auto& be = detail::gds_ops();
  if (policy_from_env() != Policy::compat && be.gds_status().available) {
    DeviceGuard guard(entry.device);
    be.gds_buffer_register(ptr, entry.bytes);
    entry.with_cufile = true;
  }
  r.buffers.emplace(ptr, std::move(entry));
}

void deregister_buffer(const Tensor& t) {
  if (!t.defined()) throw ValueError("gds_deregister_buffer: the tensor is undefined");
  const void* ptr = t.data_ptr();
  Registry& r = registry();
  Registered entry;
  {
    std::lock_guard lock(r.mu);
    auto it = r.buffers.find(ptr);
    if (it == r.buffers.end()) {
      throw ValueError("gds_deregister_buffer: this tensor's memory is not registered "
                       "(gds_register_buffer registers it)");
    }
    if (it->second.with_cufile) {
      DeviceGuard guard(it->second.device);
      detail::gds_ops().gds_buffer_deregister(const_cast<void*>(ptr));
    }
    entry = std::move(it->second);
    r.buffers.erase(it);
  }
  // `entry` (the storage reference) is dropped here, outside the registry lock: freeing
  // memory takes the allocator's locks.
}

bool is_buffer_registered(const Tensor& t) {
  if (!t.defined()) return false;
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.buffers.count(t.data_ptr()) != 0;
}

}  // namespace cudakit::gds
