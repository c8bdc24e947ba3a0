// CPU executor: the reference implementation of every built-in op. Runs for host tensors
// and, as host tasks, for the emulated backend's device tensors.
#include <cstring>

#include "cudakit/error.hpp"
#include "kernels/compare_pow.hpp"
#include "ops/dispatch.hpp"
#include "ops/executor.hpp"

namespace cudakit::ops {

namespace {
// out = f(x) over the tensor operand `a` (its offsets are calc's [0] and [1]).
template <class TO, class TI, class F>
void map_a(const BinaryArgs& a, F f) {
  auto* out = static_cast<TO*>(a.out);
  auto* x = static_cast<const TI*>(a.a);
  if (a.contiguous) {
    for (std::int64_t i = 0; i < a.n; ++i) out[i] = f(x[i]);
    return;
  }
  std::int64_t off[3];
  for (std::int64_t i = 0; i < a.n; ++i) {
    a.calc.get(i, off);
    out[off[0]] = f(x[off[1]]);
  }
}

template <class TO, class TI, class F>
void map_ab(const BinaryArgs& a, F f) {
  auto* out = static_cast<TO*>(a.out);
  auto* x = static_cast<const TI*>(a.a);
  auto* y = static_cast<const TI*>(a.b);
  if (a.contiguous) {
    for (std::int64_t i = 0; i < a.n; ++i) out[i] = f(x[i], y[i]);
    return;
  }
  std::int64_t off[3];
  for (std::int64_t i = 0; i < a.n; ++i) {
    a.calc.get(i, off);
    out[off[0]] = f(x[off[1]], y[off[2]]);
  }
}

// out = f(x, y) in the compute type C of T, where one of x, y may be the scalar operand.
template <class TO, class T, class F>
void binary_loop(const BinaryArgs& a, F f) {
  using C = compute_type<T>;
  if (a.scalar == kNoScalar) {
    map_ab<TO, T>(a, [&](T x, T y) { return f(load_c(x), load_c(y)); });
    return;
  }
  const C s = scalar_get<C>(a.value);
  if (a.scalar == kScalarOther) map_a<TO, T>(a, [&](T x) { return f(load_c(x), s); });
  else map_a<TO, T>(a, [&](T x) { return f(s, load_c(x)); });
}
}  // namespace

void cpu_binary(const BinaryArgs& a, int dtype) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    binary_loop<T, T>(a, [op = a.op](C x, C y) { return store_c<T>(binary_apply<C>(op, x, y)); });
  });
}

void cpu_compare(const BinaryArgs& a, int dtype) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    binary_loop<bool, T>(a, [op = a.op](C x, C y) { return compare_apply<C>(op, x, y); });
  });
}

void cpu_pow(const BinaryArgs& a, int dtype) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    binary_loop<T, T>(a, [](C x, C y) { return store_c<T>(pow_apply<C>(x, y)); });
  });
}

void cpu_arange(const ArangeArgs& a, int dtype) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* out = static_cast<T*>(a.out);
    for (std::int64_t i = 0; i < a.n; ++i) out[i] = arange_value<T>(a, i);
  });
}

void cpu_unary(const UnaryArgs& a, int dtype) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    auto* out = static_cast<T*>(a.out);
    auto* x = static_cast<const T*>(a.a);
    std::int64_t off[2];
    for (std::int64_t i = 0; i < a.n; ++i) {
      if (a.contiguous) off[0] = off[1] = i; else a.calc.get(i, off);
      out[off[0]] = store_c<T>(unary_apply<C>(a.op, load_c(x[off[1]])));
    }
  });
}

void cpu_cast(const CastArgs& a, int dst) {
  int esrc = 0;
  dispatch_dtype(a.src_code, [&](auto tag) { esrc = sizeof(typename decltype(tag)::type); });
  dispatch_dtype(dst, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* out = static_cast<T*>(a.out);
    auto* in = static_cast<const unsigned char*>(a.a);
    std::int64_t off[2];
    for (std::int64_t i = 0; i < a.n; ++i) {
      if (a.contiguous) off[0] = off[1] = i; else a.calc.get(i, off);
      out[off[0]] = load_as<T>(in + off[1] * esrc, a.src_code);
    }
  });
}

void cpu_fill(const FillArgs& a, int esize) {
  auto* out = static_cast<unsigned char*>(a.out);
  std::int64_t off[1];
  for (std::int64_t i = 0; i < a.n; ++i) {
    if (a.contiguous) off[0] = i; else a.calc.get(i, off);
    std::memcpy(out + off[0] * esize, a.value, esize);
  }
}

void cpu_sum(const void* in, const OffsetCalc<1>& calc, std::int64_t n, int in_dtype, void* out,
             int out_dtype) {
  dispatch_dtype(in_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* x = static_cast<const T*>(in);
    std::int64_t off[1];
    if constexpr (is_complex_t<T>::value) {
      Complex128 acc{0, 0};
      for (std::int64_t i = 0; i < n; ++i) {
        calc.get(i, off);
        acc.re += x[off[0]].re;
        acc.im += x[off[0]].im;
      }
      *static_cast<T*>(out) = convert<T>(acc);
    } else if constexpr (std::is_integral_v<T>) {
      std::uint64_t acc = 0;  // wraps like int64 arithmetic, without UB
      for (std::int64_t i = 0; i < n; ++i) {
        calc.get(i, off);
        acc += static_cast<std::uint64_t>(static_cast<std::int64_t>(x[off[0]]));
      }
      *static_cast<std::int64_t*>(out) = static_cast<std::int64_t>(acc);
    } else {
      double acc = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        calc.get(i, off);
        acc += static_cast<double>(load_c(x[off[0]]));
      }
      *static_cast<T*>(out) = convert<T>(acc);
    }
  });
  (void)out_dtype;
}

void cpu_matmul(const void* A, std::int64_t sa0, std::int64_t sa1, const void* B, std::int64_t sb0,
                std::int64_t sb1, void* Cp, std::int64_t m, std::int64_t n, std::int64_t k, int dtype,
                std::int64_t batch, std::int64_t batch_a, std::int64_t batch_b) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_complex_t<T>::value || std::is_integral_v<T>) {
      throw NotSupportedError("matmul supports float16, bfloat16, float32 and float64");
    } else {
      for (std::int64_t q = 0; q < batch; ++q) {
        auto* a = static_cast<const T*>(A) + q * batch_a;
        auto* b = static_cast<const T*>(B) + q * batch_b;
        auto* c = static_cast<T*>(Cp) + q * m * n;
        // Accumulate in double so the reference is more accurate than any GPU path.
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (std::int64_t p = 0; p < k; ++p)
              acc += static_cast<double>(load_c(a[i * sa0 + p * sa1])) *
                     static_cast<double>(load_c(b[p * sb0 + j * sb1]));
            c[i * n + j] = convert<T>(acc);
          }
      }
    }
  });
}

void cpu_sample(const rng::SampleArgs& a) {
  std::uint64_t base = rng::philox_start(a.philox);
  int pb = rng::per_block(a.dtype, a.dist, a.range);
  std::int64_t blocks = (a.n + pb - 1) / pb;
  for (std::int64_t b = 0; b < blocks; ++b) rng::sample_block(a, base, b);
}

}  // namespace cudakit::ops
