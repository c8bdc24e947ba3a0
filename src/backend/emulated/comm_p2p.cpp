// Send / recv of the emulated collectives engine (comm_engine.hpp): a byte FIFO per ordered
// rank pair in the shared segment (comm_segment.hpp); a group's point-to-point operations
// progress together, so sends and receives in any order cannot deadlock.
#include <algorithm>
#include <cstring>
#include <thread>

#include "backend/emulated/comm_engine.hpp"
#include "backend/emulated/comm_segment.hpp"
#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
namespace res = nccl::result;

namespace {
constexpr std::uint32_t kP2pMagic = 0x3250504bu;  // "KPP2": header of a send
}  // namespace

struct EmulatedComm::P2p {
  EmulatedComm* comm;
  bool is_send;
  int peer;
  const unsigned char* src;  // send
  unsigned char* dst;        // recv
  std::uint64_t bytes;
  std::int32_t type;
  unsigned char header[16];
  std::uint64_t moved = 0;  // bytes of header + payload moved so far
  bool done = false;
};

bool EmulatedComm::step(P2p& op) {
  Segment& seg = *seg_;
  const std::uint64_t cap = seg.h().fifo_bytes;
  const std::uint64_t total = sizeof op.header + op.bytes;
  const int src = op.is_send ? rank_ : op.peer, dst = op.is_send ? op.peer : rank_;
  FifoCtl& f = seg.fifo(src, dst);
  unsigned char* ring = seg.fifo_data(src, dst);
  bool moved_any = false;
  while (!op.done) {
    const std::uint64_t head = f.head.load(std::memory_order_acquire);
    const std::uint64_t tail = f.tail.load(std::memory_order_acquire);
    std::uint64_t room = op.is_send ? cap - (head - tail) : head - tail;
    if (room == 0) break;
    // Stop at the end of the header (the receiver checks it before taking payload) and at
    // the ring's end.
    std::uint64_t want = op.moved < sizeof op.header ? sizeof op.header - op.moved : total - op.moved;
    const std::uint64_t pos = (op.is_send ? head : tail) % cap;
    const std::uint64_t k = std::min({room, want, cap - pos});
    unsigned char* ring_at = ring + pos;
    if (op.is_send) {
      if (op.moved < sizeof op.header) std::memcpy(ring_at, op.header + op.moved, k);
      else std::memcpy(ring_at, op.src + (op.moved - sizeof op.header), k);
      f.head.store(head + k, std::memory_order_release);
    } else {
      if (op.moved < sizeof op.header) std::memcpy(op.header + op.moved, ring_at, k);
      else std::memcpy(op.dst + (op.moved - sizeof op.header), ring_at, k);
      f.tail.store(tail + k, std::memory_order_release);
    }
    op.moved += k;
    moved_any = true;
    seg.ring(op.peer);
    if (!op.is_send && op.moved == sizeof op.header) {
      std::uint32_t magic = 0;
      std::int32_t type = 0;
      std::uint64_t bytes = 0;
      std::memcpy(&magic, op.header, 4);
      std::memcpy(&type, op.header + 4, 4);
      std::memcpy(&bytes, op.header + 8, 8);
      if (magic != kP2pMagic || bytes != op.bytes || type != op.type) {
        const std::string why =
            "mismatched send/recv: rank " + std::to_string(op.peer) + " sent " +
            std::to_string(bytes) + " bytes of " +
            comm_type_name(static_cast<CommDataType>(type)) + " but rank " +
            std::to_string(rank_) + " posted a recv of " + std::to_string(op.bytes) +
            " bytes of " + comm_type_name(static_cast<CommDataType>(op.type));
        seg.fail(res::invalid_usage, why);
        raise(res::invalid_usage, why);
      }
    }
    if (op.moved == total) op.done = true;
  }
  return moved_any;
}

void EmulatedComm::run_group_or_throw(
    const std::vector<std::pair<std::shared_ptr<EmulatedComm>, CommArgs>>& ops) {
  std::vector<P2p> p2p;
  for (const auto& [comm, a] : ops) {
    comm->wait_ready();
    if (a.kind != CommKind::send && a.kind != CommKind::recv) continue;
    P2p op{};
    op.comm = comm.get();
    op.is_send = a.kind == CommKind::send;
    op.peer = a.root;
    op.src = static_cast<const unsigned char*>(a.send);
    op.dst = static_cast<unsigned char*>(a.recv);
    op.bytes = a.count * comm_type_size(a.type);
    op.type = static_cast<std::int32_t>(a.type);
    std::memcpy(op.header, &kP2pMagic, 4);
    std::memcpy(op.header + 4, &op.type, 4);
    std::memcpy(op.header + 8, &op.bytes, 8);
    p2p.push_back(op);
  }
  EmulatedComm* failing = nullptr;
  try {
    // Point to point first, all together: no order of sends and receives can deadlock.
    for (;;) {
      EmulatedComm* waiter = nullptr;
      std::vector<int> peers;
      std::uint32_t bell = 0;
      for (P2p& op : p2p) {
        if (op.done) continue;
        if (!waiter) {
          waiter = op.comm;
          bell = waiter->seg_->slot(waiter->rank_).doorbell.load(std::memory_order_acquire);
        }
      }
      if (!waiter) break;
      bool progressed = false;
      for (P2p& op : p2p) {
        if (op.done) continue;
        failing = op.comm;
        progressed = op.comm->step(op) || progressed;
        if (!op.done && op.comm == waiter) peers.push_back(op.peer);
      }
      if (progressed) continue;
      failing = waiter;
      if (peers.empty()) continue;  // only other communicators' operations are pending
      Segment& seg = *waiter->seg_;
      auto& word = seg.slot(waiter->rank_).doorbell;
      Waiter w(seg, waiter->rank_, waiter->timeout_, waiter->aborted_);
      w.until(word, [&] { return word.load(std::memory_order_acquire) != bell; },
              "send/recv with rank(s) " + [&] {
                std::string s;
                for (int p : peers) s += (s.empty() ? "" : ", ") + std::to_string(p);
                return s;
              }(),
              peers);
    }
  } catch (const nccl::NcclError& e) {
    if (failing) failing->fail_local(e.what(), e.code(), e.timed_out());
    throw;
  }
  for (const auto& [comm, a] : ops) {
    if (a.kind == CommKind::send || a.kind == CommKind::recv) continue;
    comm->run(a);
  }
}

}  // namespace cudakit::detail::emulated
