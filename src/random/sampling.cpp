// rand / randn / randint / uniform_ / normal_: one reservation, one executor call.
#include "cudakit/error.hpp"
#include "cudakit/random.hpp"
#include "ops/executor.hpp"

namespace cudakit {
using namespace ops;

namespace {
Generator& pick(Generator* g, const Device& d) {
  if (g) {
    if (!(g->device() == d))
      throw ValueError("generator is for " + g->device().str() + " but the tensor is on " + d.str() +
                       "; use a generator of the tensor's device");
    return *g;
  }
  return d.is_cpu() ? default_cpu_generator() : default_generator(d.index);
}

void sample(Tensor& t, int dist, double a, double b, std::int64_t low, std::uint64_t range, Generator* g) {
  if (!t.defined()) throw ValueError("sampling into an undefined tensor");
  if (!t.is_contiguous()) {
    Tensor tmp = empty(t.sizes(), TensorOptions{t.dtype(), t.device(), false});
    sample(tmp, dist, a, b, low, range, g);
    t.copy_(tmp);
    return;
  }
  rng::SampleArgs args{};
  args.out = t.data_ptr();
  args.n = t.numel();
  args.dtype = code(t.dtype());
  args.dist = dist;
  args.a = a;
  args.b = b;
  args.low = low;
  args.range = range;
  if (args.n == 0) return;
  Device d = t.device();
  Generator& gen = pick(g, d);
  sanitize(dist == rng::kUniform ? "uniform_" : dist == rng::kNormal ? "normal_" : "random_", d, {},
           {{&t, "self"}});
  int pb = rng::per_block(args.dtype, dist, range);
  PhiloxReservation r = gen.reserve(static_cast<std::uint64_t>((args.n + pb - 1) / pb));
  args.philox = rng::PhiloxArgs{r.seed, r.offset, r.offset_ptr};
  args.keys = rng::philox_keys(r.seed);
  if (exec_for(d) == Exec::cuda) cuda_sample(d.index, stream_for(d), args);
  else run_cpu(d, {t.storage()}, [args] { cpu_sample(args); }, "ck_sample");
}

void require_float(const Tensor& t, const char* name) {
  if (!is_floating_point(t.dtype()))
    throw ValueError(std::string(name) + " supports float16, bfloat16, float32 and float64 tensors, not " +
                     dtype_name(t.dtype()));
}
}  // namespace

Tensor& uniform_(Tensor& t, double from, double to, Generator* g) {
  require_float(t, "uniform_");
  if (!(from <= to)) throw ValueError("uniform_ expects from <= to, got from=" + std::to_string(from) + " to=" + std::to_string(to));
  sample(t, rng::kUniform, from, to - from, 0, 0, g);
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* g) {
  require_float(t, "normal_");
  if (!(std >= 0)) throw ValueError("normal_ expects std >= 0.0, got std=" + std::to_string(std));
  sample(t, rng::kNormal, mean, std, 0, 0, g);
  return t;
}

Tensor& random_(Tensor& t, std::int64_t low, std::int64_t high, Generator* g) {
  if (is_complex(t.dtype()) || t.dtype() == DType::bool_)
    throw ValueError(std::string("randint does not support dtype ") + dtype_name(t.dtype()));
  if (high <= low)
    throw ValueError("random_ expects 'from' to be less than 'to', but got from=" + std::to_string(low) +
                     " >= to=" + std::to_string(high));
  std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  sample(t, rng::kRandint, 0, 0, low, range, g);
  return t;
}

Tensor rand(const Shape& s, const TensorOptions& o, Generator* g) {
  Tensor t = empty(s, o);
  return uniform_(t, 0.0, 1.0, g);
}
Tensor randn(const Shape& s, const TensorOptions& o, Generator* g) {
  Tensor t = empty(s, o);
  return normal_(t, 0.0, 1.0, g);
}
Tensor randint(std::int64_t low, std::int64_t high, const Shape& s, const TensorOptions& o, Generator* g) {
  Tensor t = empty(s, o);
  return random_(t, low, high, g);
}

Tensor& Tensor::uniform_(double from, double to, Generator* g) { return cudakit::uniform_(*this, from, to, g); }
Tensor& Tensor::normal_(double mean, double std, Generator* g) { return cudakit::normal_(*this, mean, std, g); }

}  // namespace cudakit
