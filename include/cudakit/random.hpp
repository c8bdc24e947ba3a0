// Random number generation (seed: "Random Number Generator" — get_rng_state[_all],
// set_rng_state[_all], manual_seed[_all], seed[_all], initial_seed) and sampling.
//
// One Philox4x32-10 generator per device (plus one for host tensors), each a (seed, offset)
// pair: offset counts 128-bit Philox blocks consumed. Sampling is counter-based, so the same
// seed and offset give bit-identical values on the cuda and the emulated backend.
// As torch.cuda: the default seed is 67280421310721 until seeded (lazy: nothing touches a
// device), seed() draws a non-deterministic seed, and the state is a 16-byte host uint8
// tensor: little-endian uint64 seed followed by uint64 offset.
//
// CUDA graphs: between capture_prologue() and capture_epilogue() a generator hands out
// reservations whose offset is read from device memory when the kernel runs; before each
// replay, replay_prologue() writes the generator's current offset there and advances it by
// the graph's total consumption, so every replay draws fresh numbers.
//
// Thread-safety: Generator methods are thread-safe (an internal mutex); the free functions
// act on the default generators and are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cudakit/export.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

namespace CUDAKIT_API cudakit {

inline constexpr std::uint64_t kDefaultRngSeed = 67280421310721ull;

// A reservation of Philox blocks for one sampling call. If offset_ptr is non-null, the
// starting block is *offset_ptr + offset, read on the device at kernel time.
struct PhiloxReservation {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  const std::uint64_t* offset_ptr = nullptr;
};

class Generator {
 public:
  // A generator for `device` (Device::cpu() for host tensors).
  explicit Generator(Device device, std::uint64_t seed = kDefaultRngSeed);
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  Device device() const noexcept { return device_; }
  void manual_seed(std::uint64_t seed);  // sets the seed and resets the offset to 0
  std::uint64_t seed();                  // seeds non-deterministically; returns the seed
  std::uint64_t initial_seed() const;
  std::uint64_t offset() const;
  void set_offset(std::uint64_t offset);
  Tensor get_state() const;              // 16-byte uint8 host tensor
  void set_state(const Tensor& state);   // ValueError unless 16 uint8 values

  // Reserves `blocks` Philox blocks (graph-relative while capturing).
  PhiloxReservation reserve(std::uint64_t blocks);

  // ---- CUDA graph support (used by the graphs module) ----
  void capture_prologue();               // subsequent reservations read the offset on device
  std::uint64_t capture_epilogue();      // ends it; returns blocks the graph consumes per replay
  // Before each replay of a graph captured with this generator: writes the current offset
  // to device memory (ordered on `stream`) and advances the offset by `graph_blocks`.
  void replay_prologue(std::uint64_t graph_blocks, StreamRef stream);
  bool capturing() const;

 private:
  mutable std::mutex mu_;
  Device device_;
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
  bool capturing_ = false;
  std::uint64_t intragraph_ = 0;
  Tensor device_offset_;  // int64 0-d tensor on device_, allocated at the first capture
  // Recorded after device_offset_'s zero fill: replays wait for it on their own stream
  // (a device-side wait; the host never blocks, so capture works under sync debug "error").
  std::shared_ptr<Event> offset_ready_;
};

// Default generator of a device (kCurrentDevice = current) / for host tensors.
Generator& default_generator(int device = kCurrentDevice);
Generator& default_cpu_generator();

// torch.cuda's 9 names.
void manual_seed(std::uint64_t seed);       // current device
void manual_seed_all(std::uint64_t seed);   // every device
std::uint64_t seed();                       // current device, non-deterministic
void seed_all();                            // one non-deterministic seed for every device
std::uint64_t initial_seed();               // current device
Tensor get_rng_state(int device = kCurrentDevice);
std::vector<Tensor> get_rng_state_all();
void set_rng_state(const Tensor& state, int device = kCurrentDevice);
void set_rng_state_all(const std::vector<Tensor>& states);

// Sampling (float16/bfloat16/float32/float64 for rand/randn; any integer or float dtype
// for randint). `generator` defaults to the default generator of the tensor's device.
Tensor rand(const Shape& sizes, const TensorOptions& options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& sizes, const TensorOptions& options = {}, Generator* generator = nullptr);
// Integers uniform in [low, high); options.dtype defaults to float32 in TensorOptions, so
// pass an integer dtype explicitly (the Python binding defaults to int64 like torch).
Tensor randint(std::int64_t low, std::int64_t high, const Shape& sizes,
               const TensorOptions& options, Generator* generator = nullptr);
// In place: fills `t` (any strides) from the distribution.
Tensor& uniform_(Tensor& t, double from = 0.0, double to = 1.0, Generator* generator = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
Tensor& random_(Tensor& t, std::int64_t low, std::int64_t high, Generator* generator = nullptr);

}  // namespace cudakit
