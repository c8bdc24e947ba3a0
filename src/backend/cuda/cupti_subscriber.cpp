// The one CUPTI subscriber (cupti_subscriber.hpp).
#include "backend/cuda/cupti_subscriber.hpp"


#include "backend/cuda/cupti.hpp"

#if __has_include(<cupti_callbacks.h>)
#include <cupti_callbacks.h>
#include <cupti_result.h>
#define CUDAKIT_HAVE_CUPTI_HEADERS 1
#else
#define CUDAKIT_HAVE_CUPTI_HEADERS 0
#endif

namespace cudakit::detail::cuda {

CuptiSubscriber& CuptiSubscriber::instance() noexcept {
  static CuptiSubscriber* s = new CuptiSubscriber();  // leaked: CUPTI may call back until exit
  return *s;
}

void CuptiSubscriber::dispatch(void* self, std::uint32_t domain, std::uint32_t cbid,
                               const void* data) noexcept {
  auto* s = static_cast<CuptiSubscriber*>(self);
  for (Slot& slot : s->slots_) {
    if (const Client* c = slot.client.load(std::memory_order_acquire)) {
      c->fn(c->user, domain, cbid, data);
    }
  }
}

const CuptiSubscriber::Client* CuptiSubscriber::intern(Callback fn, void* user) {
  for (const Client& c : clients_seen_) {
    if (c.fn == fn && c.user == user) return &c;
  }
  return &clients_seen_.emplace_back(Client{fn, user});
}

#if CUDAKIT_HAVE_CUPTI_HEADERS

namespace {

// CUPTI's exact callback type, forwarding to the dispatcher.
void CUPTIAPI trampoline(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* data) {
  CuptiSubscriber::dispatch(userdata, static_cast<std::uint32_t>(domain), cbid, data);
}

struct Fns {
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiSubscribe_v2) subscribe_v2 = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};

const Fns& fns() {
  static const Fns f = [] {
    Fns r;
    const CuptiApi& api = cupti();
    if (!api.loaded) return r;
    r.subscribe = reinterpret_cast<decltype(r.subscribe)>(api.symbol("cuptiSubscribe"));
    r.subscribe_v2 = reinterpret_cast<decltype(r.subscribe_v2)>(api.symbol("cuptiSubscribe_v2"));
    r.unsubscribe = reinterpret_cast<decltype(r.unsubscribe)>(api.symbol("cuptiUnsubscribe"));
    r.enable_callback =
        reinterpret_cast<decltype(r.enable_callback)>(api.symbol("cuptiEnableCallback"));
    r.result_string =
        reinterpret_cast<decltype(r.result_string)>(api.symbol("cuptiGetResultString"));
    return r;
  }();
  return f;
}

std::string result_text(CUptiResult rc) {
  const char* s = nullptr;
  if (fns().result_string && fns().result_string(rc, &s) == CUPTI_SUCCESS && s) {
    return std::string(s) + " (" + std::to_string(static_cast<int>(rc)) + ")";
  }
  return "CUPTI error " + std::to_string(static_cast<int>(rc));
}

}  // namespace

std::string CuptiSubscriber::add(Callback fn, void* user) {
  std::lock_guard lock(mu_);
  if (clients_ == 0) {
    const CuptiApi& api = cupti();
    if (!api.loaded) return api.reason;
    const Fns& f = fns();
    if (!f.subscribe || !f.unsubscribe || !f.enable_callback) {
      return api.path + " lacks cuptiSubscribe/cuptiEnableCallback";
    }
    CUpti_SubscriberHandle h = nullptr;
    CUptiResult rc;
    char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 64] = {};
    if (f.subscribe_v2) {
      CUpti_SubscriberParams params{};
      params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
      params.subscriberName = "cudakit";
      params.oldSubscriberName = holder;
      params.oldSubscriberSize = sizeof holder;
      rc = f.subscribe_v2(&h, trampoline, this, &params);
    } else {
      rc = f.subscribe(&h, trampoline, this);
    }
    if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      std::string who = holder[0] ? std::string("'") + holder + "'" : std::string("another tool");
      return "CUPTI is already in use by " + who +
             " (CUPTI allows one subscriber per process: Nsight Systems, Nsight Compute, "
             "torch.profiler, ...): this trace has no device activity (kernels, copies, API "
             "calls); cudakit's own events (NVTX ranges, allocator, graph lifecycle) are "
             "recorded. Run the trace without the other tool to get the device part";
    }
    if (rc != CUPTI_SUCCESS) return "cuptiSubscribe failed: " + result_text(rc);
    handle_ = h;
  }
  for (Slot& slot : slots_) {
    if (slot.client.load(std::memory_order_relaxed) == nullptr) {
      slot.client.store(intern(fn, user), std::memory_order_release);
      ++clients_;
      return "";
    }
  }
  if (clients_ == 0) {  // (kMaxClients is far above the clients cudakit has)
    fns().unsubscribe(static_cast<CUpti_SubscriberHandle>(handle_));
    handle_ = nullptr;
  }
  return "too many CUPTI clients in cudakit";
}

void CuptiSubscriber::remove(Callback fn, void* user) noexcept {
  std::lock_guard lock(mu_);
  for (Slot& slot : slots_) {
    const Client* c = slot.client.load(std::memory_order_relaxed);
    if (c != nullptr && c->fn == fn && c->user == user) {
      slot.client.store(nullptr, std::memory_order_release);
      if (--clients_ == 0 && handle_) {
        for (auto& [key, count] : wanted_) {
          if (count > 0) {
            fns().enable_callback(0, static_cast<CUpti_SubscriberHandle>(handle_),
                                  static_cast<CUpti_CallbackDomain>(key.first), key.second);
          }
        }
        wanted_.clear();
        fns().unsubscribe(static_cast<CUpti_SubscriberHandle>(handle_));
        handle_ = nullptr;
      }
      return;
    }
  }
}

void CuptiSubscriber::enable(std::uint32_t domain, std::uint32_t cbid, bool on) noexcept {
  std::lock_guard lock(mu_);
  if (!handle_) return;
  try {
    int& count = wanted_[{domain, cbid}];
    const int before = count;
    count += on ? 1 : (count > 0 ? -1 : 0);
    if ((before == 0) != (count == 0)) {
      fns().enable_callback(count > 0 ? 1 : 0, static_cast<CUpti_SubscriberHandle>(handle_),
                            static_cast<CUpti_CallbackDomain>(domain), cbid);
    }
  } catch (...) {
  }
}

#else  // built without the CUPTI headers: no callbacks, said plainly

std::string CuptiSubscriber::add(Callback, void*) {
  return "cudakit was built without the CUPTI headers (cupti.h): no CUPTI callbacks";
}
void CuptiSubscriber::remove(Callback, void*) noexcept {}
void CuptiSubscriber::enable(std::uint32_t, std::uint32_t, bool) noexcept {}

#endif

}  // namespace cudakit::detail::cuda
