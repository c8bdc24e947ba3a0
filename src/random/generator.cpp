// Philox generators: state, default generators, torch.cuda's seeding functions.
#include <cstring>
#include <chrono>
#include <random>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/random.hpp"

namespace cudakit {

namespace {
std::uint64_t nondeterministic_seed() {
  std::random_device rd;
  std::uint64_t s = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  // Mix in the clock in case random_device is deterministic on this platform.
  s ^= static_cast<std::uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count()) *
       0x9E3779B97F4A7C15ull;
  return s & ((1ull << 63) - 1);  // torch keeps seeds representable as int64
}
}  // namespace

Generator::Generator(Device device, std::uint64_t seed) : device_(device), seed_(seed) {}

void Generator::manual_seed(std::uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = 0;
}

std::uint64_t Generator::seed() {
  std::uint64_t s = nondeterministic_seed();
  manual_seed(s);
  return s;
}

std::uint64_t Generator::initial_seed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seed_;
}

std::uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mu_);
  return offset_;
}

void Generator::set_offset(std::uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  offset_ = offset;
}

Tensor Generator::get_state() const {
  Tensor t = empty({16}, TensorOptions{DType::uint8, Device::cpu()});
  std::lock_guard<std::mutex> lock(mu_);
  std::memcpy(t.data_ptr(), &seed_, 8);
  std::memcpy(static_cast<char*>(t.data_ptr()) + 8, &offset_, 8);
  return t;
}

void Generator::set_state(const Tensor& state) {
  if (!state.defined() || state.dtype() != DType::uint8 || state.numel() != 16)
    throw ValueError("RNG state must be a uint8 tensor of 16 elements (seed, offset) as returned by "
                     "get_rng_state(); got " + (state.defined() ? state.to_string() : std::string("undefined")));
  Tensor h = state.to(Device::cpu()).contiguous();
  std::lock_guard<std::mutex> lock(mu_);
  std::memcpy(&seed_, h.data_ptr(), 8);
  std::memcpy(&offset_, static_cast<const char*>(h.data_ptr()) + 8, 8);
}

PhiloxReservation Generator::reserve(std::uint64_t blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  PhiloxReservation r;
  r.seed = seed_;
  if (capturing_) {
    r.offset = intragraph_;
    r.offset_ptr = static_cast<const std::uint64_t*>(device_offset_.data_ptr());
    intragraph_ += blocks;
  } else {
    r.offset = offset_;
    offset_ += blocks;
  }
  return r;
}

void Generator::capture_prologue() {
  if (device_.is_cpu()) throw ValueError("capture_prologue(): host generators cannot be used in CUDA graphs");
  Tensor buf;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (capturing_) throw Error("capture_prologue(): this generator is already being captured");
    buf = device_offset_;
  }
  // Allocated outside capture would be ideal; the graphs module calls this before it begins
  // capturing, so this allocation is not part of the graph.
  std::shared_ptr<Event> ready;
  if (!buf.defined()) {
    buf = zeros({}, TensorOptions{DType::int64, device_});
    // Every replay rewrites this word on its own replay stream (replay_prologue): the zero
    // fill, on this thread's current stream, must be complete before (found by the stream
    // sanitizer). An event the replay stream waits for orders it without blocking the host
    // (a host sync here broke the first capture under set_sync_debug_mode("error"), and the
    // graph then replayed the same random numbers every time).
    ready = std::make_shared<Event>();
    ready->record(current_stream(device_.index));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (ready) offset_ready_ = std::move(ready);
  device_offset_ = buf;
  capturing_ = true;
  intragraph_ = 0;
}

std::uint64_t Generator::capture_epilogue() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!capturing_) throw Error("capture_epilogue() without capture_prologue()");
  capturing_ = false;
  return intragraph_;
}

bool Generator::capturing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capturing_;
}

void Generator::replay_prologue(std::uint64_t graph_blocks, StreamRef stream) {
  std::uint64_t value;
  Tensor buf;
  std::shared_ptr<Event> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!device_offset_.defined()) throw Error("replay_prologue(): generator was never captured");
    value = offset_;
    offset_ += graph_blocks;
    buf = device_offset_;
    ready = offset_ready_;
  }
  if (ready) stream.wait(*ready);
  StreamGuard guard(stream);
  buf.fill_(Scalar(static_cast<long long>(value)));  // a fill on `stream`, ordered before replay
}

// ---- default generators ----
namespace {
struct Defaults {
  std::once_flag once;
  std::vector<std::unique_ptr<Generator>> gens;
};
Defaults& defaults() {
  static Defaults* d = new Defaults();  // leaked: used until process exit
  std::call_once(d->once, [] {
    int n = device_count();
    for (int i = 0; i < n; ++i) d->gens.push_back(std::make_unique<Generator>(Device{Device::Type::cuda, i}));
  });
  return *d;
}
}  // namespace

Generator& default_generator(int device) {
  int d = resolve_device(device);
  auto& g = defaults().gens;
  if (d < 0 || d >= static_cast<int>(g.size()))
    throw ValueError("no default generator for device " + std::to_string(d));
  return *g[d];
}

Generator& default_cpu_generator() {
  static Generator* g = new Generator(Device::cpu());
  return *g;
}

void manual_seed(std::uint64_t s) { default_generator().manual_seed(s); }
void manual_seed_all(std::uint64_t s) {
  for (auto& g : defaults().gens) g->manual_seed(s);
}
std::uint64_t seed() { return default_generator().seed(); }
void seed_all() {
  std::uint64_t s = nondeterministic_seed();
  for (auto& g : defaults().gens) g->manual_seed(s);
}
std::uint64_t initial_seed() { return default_generator().initial_seed(); }
Tensor get_rng_state(int device) { return default_generator(device).get_state(); }
std::vector<Tensor> get_rng_state_all() {
  std::vector<Tensor> r;
  for (auto& g : defaults().gens) r.push_back(g->get_state());
  return r;
}
void set_rng_state(const Tensor& state, int device) { default_generator(device).set_state(state); }
void set_rng_state_all(const std::vector<Tensor>& states) {
  auto& g = defaults().gens;
  if (states.size() != g.size())
    throw ValueError("set_rng_state_all: expected " + std::to_string(g.size()) + " states (one per device), got " +
                     std::to_string(states.size()));
  for (std::size_t i = 0; i < g.size(); ++i) g[i]->set_state(states[i]);
}

}  // namespace cudakit
