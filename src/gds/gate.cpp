#include "gds/gate.hpp"

#include <mutex>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"

namespace cudakit::gds::io {
namespace {

constexpr std::size_t kWordsPerPage = 1024;

struct Pool {
  std::mutex mu;
  std::vector<std::uint32_t*> free;  // signalled words
};

Pool& pool() {
  static Pool* p = new Pool;  // leaked: transfers may signal during exit
  return *p;
}

}  // namespace

GateWord acquire_gate_word() {
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  if (p.free.empty()) {
    void* page = detail::backend().host_alloc_pinned(kWordsPerPage * sizeof(std::uint32_t));
    if (!page) {
      throw OutOfMemoryError("GdsFile: cannot allocate a pinned page for stream gates", -1,
                             kWordsPerPage * sizeof(std::uint32_t));
    }
    auto* words = static_cast<std::uint32_t*>(page);
    for (std::size_t i = kWordsPerPage; i-- > 0;) {
      __atomic_store_n(&words[i], 0u, __ATOMIC_RELAXED);
      p.free.push_back(&words[i]);
    }
  }
  std::uint32_t* w = p.free.back();
  p.free.pop_back();
  return GateWord{w, __atomic_load_n(w, __ATOMIC_RELAXED) + 1};
}

void signal_gate_word(GateWord g) noexcept {
  if (!g.word) return;
  __atomic_store_n(g.word, g.target, __ATOMIC_RELEASE);
  Pool& p = pool();
  try {
    std::lock_guard lock(p.mu);
    p.free.push_back(g.word);
  } catch (...) {  // out of memory growing the free list: the word is lost, nothing else
  }
}

}  // namespace cudakit::gds::io
