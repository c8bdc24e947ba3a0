#include "ops/executor.hpp"

#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <string>

#include "backend/device_ops.hpp"
#include "backend/stream_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"
#include "ops/dispatch.hpp"

namespace cudakit::ops {

Exec exec_for(const Device& d) {
  if (d.is_cpu()) return Exec::host;
  // The backend is fixed for the process: cache the answer (hot path).
  static const bool kernels = detail::device_ops().capabilities().runs_kernels;
  return kernels ? Exec::cuda : Exec::emulated;
}

detail::StreamHandle stream_for(const Device& d) { return current_stream(d.index).handle(); }

void run_cpu(const Device& d, std::vector<std::shared_ptr<Storage>> keep, std::function<void()> fn,
             const char* kernel) {
  if (d.is_cpu()) {
    fn();
    return;
  }
  // The null handle of a legacy default stream names the current device's: make d current so
  // the task lands on d's stream (found by comm tests: a cuda:1 fill issued while cuda:0 was
  // current ran on cuda:0's stream, unordered with cuda:1's work).
  DeviceGuard guard(d.index);
  // The task keeps only what the caching allocator does not order by stream: host memory
  // (pageable or pinned: on CUDA a pageable copy is synchronous, and the pinned cache guards
  // its blocks with events) and memory someone else owns. cudakit's device blocks are
  // returned to the allocator when their last tensor goes, as on CUDA: the block is reused
  // only in stream order (or after record_stream's events), so memory_allocated() drops at
  // `del` (torch's semantics) and the emulated backend defers the host free of a released
  // segment until the streams have run what was queued before it (emulated/memory.cpp).
  std::erase_if(keep, [](const std::shared_ptr<Storage>& s) {
    return s && s->device().is_cuda() && !s->is_external();
  });
  if (keep.empty()) {
    detail::stream_ops().launch_host_kernel(stream_for(d), kernel, std::move(fn));
    return;
  }
  detail::stream_ops().launch_host_kernel(stream_for(d), kernel,
                                       [keep = std::move(keep), fn = std::move(fn)] { fn(); });
}

template <int N>
OffsetCalc<N> make_calc(const Shape& sizes, const std::array<const Shape*, N>& strides) {
  // Innermost first, dropping size-1 dims, merging dims that are contiguous for everyone.
  // Built in place (no heap: every op calls this on its hot path); dims only ever grow
  // (a merge changes the last one), so a ninth one means more than 8 for good.
  OffsetCalc<N> c{};
  int nd = 0;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (nd > 0) {
      bool merge = true;
      for (int a = 0; a < N; ++a) merge = merge && (*strides[a])[i] == c.strides[a][nd - 1] * c.sizes[nd - 1];
      if (merge) {
        c.sizes[nd - 1] *= sizes[i];
        continue;
      }
    }
    if (nd == 8)
      throw NotSupportedError("built-in ops support at most 8 non-contiguous dimensions (got more in shape " +
                              shape_str(sizes) + "); call .contiguous() first");
    c.sizes[nd] = sizes[i];
    for (int a = 0; a < N; ++a) c.strides[a][nd] = (*strides[a])[i];
    ++nd;
  }
  c.ndim = nd;
  return c;
}
template OffsetCalc<1> make_calc<1>(const Shape&, const std::array<const Shape*, 1>&);
template OffsetCalc<2> make_calc<2>(const Shape&, const std::array<const Shape*, 2>&);
template OffsetCalc<3> make_calc<3>(const Shape&, const std::array<const Shape*, 3>&);
// The jiterator's up to 8 outputs + 8 inputs (unused slots repeat an operand).
template OffsetCalc<16> make_calc<16>(const Shape&, const std::array<const Shape*, 16>&);

namespace {
// torch's overflow rule for converting a Scalar to an element type (c10's checked_convert):
// nothing overflows bool; integers must fit, except that an unsigned type also takes
// negative integers down to -max, which wrap (so `u8 - 1` is `u8 + 255`); floats must lie in
// the type's finite range unless infinite (a NaN or an infinity overflows an integer type);
// a complex value overflows a real type when its imaginary part is nonzero.
template <class D>
struct Limits;
#define CK_LIMITS(T, LO, HI, INTEGRAL, NAME) \
  template <> struct Limits<T> { static constexpr double lo = LO, hi = HI; static constexpr bool integral = INTEGRAL; static constexpr const char* name = NAME; };
CK_LIMITS(std::uint8_t, 0, 255, true, "uint8_t")
CK_LIMITS(std::int8_t, -128, 127, true, "int8_t")
CK_LIMITS(std::int16_t, -32768, 32767, true, "int16_t")
CK_LIMITS(std::int32_t, -2147483648.0, 2147483647.0, true, "int")
CK_LIMITS(std::int64_t, -9223372036854775808.0, 9223372036854775807.0, true, "int64_t")
CK_LIMITS(Half, -65504.0, 65504.0, false, "at::Half")
CK_LIMITS(BFloat16, -3.3895313892515355e38, 3.3895313892515355e38, false, "at::BFloat16")
CK_LIMITS(float, -3.4028234663852886e38, 3.4028234663852886e38, false, "float")
CK_LIMITS(double, -1.7976931348623157e308, 1.7976931348623157e308, false, "double")
#undef CK_LIMITS

template <class R>
bool real_overflows(double v) {
  using L = Limits<R>;
  if (v != v) return L::integral;                  // NaN: no integer holds it
  if (std::isinf(v)) return L::integral;           // +-inf fits a float type only
  if constexpr (std::is_same_v<R, std::int64_t>) return v < L::lo || v >= 9223372036854775808.0;
  return v < L::lo || v > L::hi;
}

template <class D>
bool overflows(const Scalar& v) {
  if constexpr (std::is_same_v<D, bool>) {
    return false;
  } else if constexpr (is_complex_t<D>::value) {
    using R = decltype(D{}.re);
    if (v.kind == Scalar::Kind::integer || v.kind == Scalar::Kind::boolean) return false;
    const std::complex<double> c = v.kind == Scalar::Kind::complex ? v.c : std::complex<double>(v.d, 0);
    return real_overflows<R>(c.real()) || real_overflows<R>(c.imag());
  } else {
    using L = Limits<D>;
    switch (v.kind) {
      case Scalar::Kind::boolean: return false;
      case Scalar::Kind::integer:
        if constexpr (L::integral) {
          if constexpr (std::is_same_v<D, std::int64_t>) return false;
          if (L::lo == 0 && v.i < 0) return -static_cast<double>(v.i) > L::hi;  // wraps
          return static_cast<double>(v.i) < L::lo || static_cast<double>(v.i) > L::hi;
        } else {
          return static_cast<double>(v.i) < L::lo || static_cast<double>(v.i) > L::hi;
        }
      case Scalar::Kind::floating: return real_overflows<D>(v.d);
      default: return v.c.imag() != 0 || real_overflows<D>(v.c.real());
    }
  }
}

std::string scalar_str(const Scalar& v) {
  char buf[96];
  switch (v.kind) {
    case Scalar::Kind::boolean: return v.i ? "True" : "False";
    case Scalar::Kind::integer: return std::to_string(v.i);
    case Scalar::Kind::floating: std::snprintf(buf, sizeof buf, "%.17g", v.d); return buf;
    default: std::snprintf(buf, sizeof buf, "(%.17g%+.17gj)", v.c.real(), v.c.imag()); return buf;
  }
}

template <class D>
D checked(const Scalar& v, DType t, const char* op) {
  if (overflows<D>(v)) [[unlikely]] {
    std::string name;
    if constexpr (std::is_same_v<D, Complex64>) name = "c10::complex<float>";
    else if constexpr (std::is_same_v<D, Complex128>) name = "c10::complex<double>";
    else if constexpr (!std::is_same_v<D, bool>) name = Limits<D>::name;
    throw Error(std::string(op) + ": value " + scalar_str(v) + " cannot be converted to type " + name +
                " without overflow (the op computes in " + dtype_name(t) +
                "); use a value in that type's range or a wider dtype (e.g. .to(cudakit.int64))");
  }
  switch (v.kind) {
    case Scalar::Kind::boolean:
    case Scalar::Kind::integer: return convert<D>(v.i);
    case Scalar::Kind::floating: return convert<D>(v.d);
    default: return convert<D>(Complex128{v.c.real(), v.c.imag()});
  }
}
}  // namespace

void scalar_to_bytes(const Scalar& v, DType t, unsigned char out[16], const char* op) {
  std::memset(out, 0, 16);
  dispatch_dtype(code(t), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T d = checked<T>(v, t, op);
    std::memcpy(out, &d, sizeof(T));
  });
}

void scalar_operand(const Scalar& v, DType t, ScalarValue& out, const char* op) {
  dispatch_dtype(code(t), [&](auto tag) {
    using C = compute_type<typename decltype(tag)::type>;
    // half/bfloat16 compute in float (torch's opmath): the scalar is checked and kept there.
    const DType ct = std::is_same_v<C, float> ? DType::float32 : t;
    scalar_set<C>(out, checked<C>(v, ct, op));
  });
}

}  // namespace cudakit::ops
