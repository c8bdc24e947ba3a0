// The process's one CUPTI subscriber (cuptiSubscribe allows one per process), shared by every
// part of cudakit that needs CUPTI callbacks: today the tracer's activity session
// (cupti_activity.cpp: stream and context lifecycle), later anything else (e.g. a sanitizer)
// registers here instead of subscribing itself. The graph-id queries of cupti.hpp need no
// subscription and do not go through here.
//
// Subscribing is also how CUPTI clients announce themselves: CUPTI's documentation asks every
// client to subscribe before starting a session and answers
// CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED when another one (Nsight Systems, Nsight
// Compute, torch.profiler's Kineto, ...) holds it. add() then returns a message naming the
// holder when CUPTI says who (cuptiSubscribe_v2), and the caller degrades instead of failing
// (the tracer records cudakit's own events and says why the device part is missing). The
// subscription is taken by the first client and released by the last one, so a later
// torch.profiler session in the same process is not locked out by cudakit.
//
// Thread-safety: add/remove/enable are serialised by a mutex; dispatch to clients is
// lock-free (a fixed table of atomic slots), from whatever thread CUPTI calls back on.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace cudakit::detail::cuda {

class CuptiSubscriber {
 public:
  // `data` is the CUPTI callback data of the domain (CUpti_ResourceData*, ...).
  using Callback = void (*)(void* user, std::uint32_t domain, std::uint32_t cbid,
                            const void* data) noexcept;

  static CuptiSubscriber& instance() noexcept;

  // Registers a client (the first one subscribes). Returns "" on success, else a message
  // saying why callbacks are unavailable (CUPTI missing, held by another tool, ...).
  std::string add(Callback fn, void* user);
  // Unregisters; the last client unsubscribes. Never throws.
  void remove(Callback fn, void* user) noexcept;
  // Asks for `cbid` of `domain` (CUpti_CallbackDomain / CUpti_CallbackId values); counted per
  // client, so two clients can want the same callback. Needs a registered client.
  void enable(std::uint32_t domain, std::uint32_t cbid, bool on) noexcept;

  // Internal: what CUPTI's callback forwards to (`self` is the subscriber).
  static void dispatch(void* self, std::uint32_t domain, std::uint32_t cbid,
                       const void* data) noexcept;

 private:
  CuptiSubscriber() = default;

  static constexpr int kMaxClients = 8;
  // A client is one (fn, user) pair behind one pointer, so a dispatch racing remove() or a
  // re-add() calls a matching pair: with fn and user in two atomics it could read a live fn
  // with the user a concurrent remove() had just cleared (a null Session* on CUPTI's thread).
  // Pairs are interned and never freed (a handful per process: one per client object), so a
  // dispatch that loaded one just before remove() still reads valid memory.
  struct Client {
    Callback fn;
    void* user;
  };
  struct Slot {
    std::atomic<const Client*> client{nullptr};
  };
  const Client* intern(Callback fn, void* user);  // mu_ held
  Slot slots_[kMaxClients];
  std::deque<Client> clients_seen_;  // every pair ever added (stable addresses)
  std::mutex mu_;
  void* handle_ = nullptr;  // CUpti_SubscriberHandle while any client is registered
  int clients_ = 0;
  std::map<std::pair<std::uint32_t, std::uint32_t>, int> wanted_;  // (domain, cbid) -> count
};

}  // namespace cudakit::detail::cuda
