// The device allocator's live blocks by address (free(ptr) finds its block here).
//
// Why not std::unordered_map, as before (issue 31): every allocation inserted a node and
// every free found and erased it, each a modulo by the bucket count (a division), a walk
// from the bucket array to a separately allocated node, and a node allocation or release.
// All of it runs under the device mutex, which 8 allocating threads queue on; callgrind on
// the mixed live set (bench/memory/mixed_loop.cpp) put the map at ~160 instructions of the
// ~1130 per step inside the mutex. Here the pairs sit in one array: open addressing with
// linear probing, Fibonacci hashing (a multiply and a shift; block addresses are multiples
// of 512, which the multiply spreads), at most half full, and backward-shift deletion (no
// tombstones, so probe chains stay short however long the program runs). A lookup reads one
// cache line where the map read two or three.
//
// Not thread-safe: used under the device allocator's locks (fast_lock_).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cudakit::memory {

struct Block;

class ActiveMap {
 public:
  ActiveMap() { rebuild(kInitialSlots); }

  static constexpr std::size_t npos = ~std::size_t(0);
  // The slot holding `key` (valid until the map changes), or npos.
  std::size_t slot_of(std::uintptr_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.block) return npos;
      if (s.key == key) return i;
    }
  }
  Block* at(std::size_t slot) const noexcept { return slots_[slot].block; }
  // The block at `key`, or nullptr.
  Block* find(std::uintptr_t key) const noexcept {
    const std::size_t i = slot_of(key);
    return i == npos ? nullptr : slots_[i].block;
  }
  // Adds key -> b (b not null); false, changing nothing, when key is present (as emplace).
  bool insert(std::uintptr_t key, Block* b) {
    if (2 * (count_ + 1) > mask_ + 1) rebuild(2 * (mask_ + 1));
    std::size_t i = home(key);
    for (; slots_[i].block; i = (i + 1) & mask_)
      if (slots_[i].key == key) return false;
    slots_[i] = Slot{key, b};
    ++count_;
    return true;
  }
  // Removes `key`; false when absent.
  bool erase(std::uintptr_t key) noexcept {
    const std::size_t i = slot_of(key);
    if (i == npos) return false;
    erase_slot(i);
    return true;
  }
  // Removes the member in `slot` (from slot_of).
  void erase_slot(std::size_t i) noexcept {
    // Backward shift: move later members of the probe run into the hole when their home
    // position does not lie (cyclically) after the hole, so every member stays reachable.
    for (std::size_t j = (i + 1) & mask_; slots_[j].block; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --count_;
  }
  std::size_t size() const noexcept { return count_; }
  // f(Block*) for every member, in no particular order (the map must not change meanwhile).
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.block) f(s.block);
  }

 private:
  static constexpr std::size_t kInitialSlots = 1024;  // 16 KiB; doubles at half full
  struct Slot {
    std::uintptr_t key = 0;
    Block* block = nullptr;  // nullptr: empty
  };
  std::size_t home(std::uintptr_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void rebuild(std::size_t n) {  // n: a power of two >= 2 * count_
    std::vector<Slot> old(n);
    old.swap(slots_);
    mask_ = n - 1;
    shift_ = 64u - static_cast<unsigned>(__builtin_ctzll(n));
    for (const Slot& s : old) {
      if (!s.block) continue;
      std::size_t i = home(s.key);
      while (slots_[i].block) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0, count_ = 0;
  unsigned shift_ = 64;
};

}  // namespace cudakit::memory
