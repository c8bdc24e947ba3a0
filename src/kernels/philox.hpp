// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and
// the transforms from its 32-bit outputs to the distributions cudakit samples.
//
// Shared verbatim by the CPU executor and the CUDA kernels, and written with plain IEEE
// + - * / and sqrt only (no libm transcendental, no implicit fused multiply-add: kernels are
// built with --fmad=false), so that the same (seed, offset) gives bit-identical values on the
// GPU and on the emulated backend -- except the float32/16/bf16 normal transform, which uses
// the GPU's fast special functions (see bm_pair_f32: same distribution, close values).
//
// Stream layout: a generator's state is (seed, offset). offset counts Philox blocks (one
// block = one 128-bit counter value = four 32-bit words). Element i of a sampling call that
// starts at `offset` uses counter (offset + i / per_block); a call consumes
// ceil(n / per_block) blocks, per_block being 4 for 32-bit samples and 2 for 64-bit ones.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/numeric.hpp"

namespace cudakit::rng {

struct Philox4 {
  std::uint32_t v[4];
};

CK_HD std::uint32_t mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t* hi) {
#if defined(__CUDA_ARCH__)
  // Keep the round in 32-bit registers (the 64-bit product form compiled to 64-bit
  // multiplies, masks and XORs): IMAD.HI + IMAD.
  *hi = __umulhi(a, b);
  return a * b;
#endif
  std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  *hi = static_cast<std::uint32_t>(p >> 32);
  return static_cast<std::uint32_t>(p);
}

#if defined(__CUDA_ARCH__)
#define CK_UNROLL _Pragma("unroll")
#else
#define CK_UNROLL
#endif

CK_HD Philox4 philox4x32_10(Philox4 ctr, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  std::uint32_t c0 = ctr.v[0], c1 = ctr.v[1], c2 = ctr.v[2], c3 = ctr.v[3];
  // Fully unrolled on the GPU: each round is two IMAD.WIDE and two 3-input XORs.
  CK_UNROLL
  for (int r = 0; r < 10; ++r) {
    if (r > 0) { k0 += W0; k1 += W1; }
    std::uint32_t hi0, hi1;
    std::uint32_t lo0 = mulhilo32(M0, c0, &hi0);
    std::uint32_t lo1 = mulhilo32(M1, c2, &hi1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The ten round keys of a seed, computed once per thread by the GPU kernels (saves the two
// key additions per round inside the sampling loop). Same values philox4x32_10 derives.
struct PhiloxKeys {
  std::uint32_t k0[10], k1[10];
};
CK_HD PhiloxKeys philox_keys(std::uint64_t seed) {
  PhiloxKeys k;
  std::uint32_t a = static_cast<std::uint32_t>(seed), b = static_cast<std::uint32_t>(seed >> 32);
  CK_UNROLL
  for (int r = 0; r < 10; ++r) {
    k.k0[r] = a; k.k1[r] = b;
    a += 0x9E3779B9u; b += 0xBB67AE85u;
  }
  return k;
}
CK_HD Philox4 philox4x32_10(std::uint64_t index, const PhiloxKeys& k) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  std::uint32_t c0 = static_cast<std::uint32_t>(index), c1 = static_cast<std::uint32_t>(index >> 32), c2 = 0, c3 = 0;
  CK_UNROLL
  for (int r = 0; r < 10; ++r) {
    std::uint32_t hi0, hi1;
    std::uint32_t lo0 = mulhilo32(M0, c0, &hi0);
    std::uint32_t lo1 = mulhilo32(M1, c2, &hi1);
    c0 = hi1 ^ c1 ^ k.k0[r];
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k.k1[r];
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Block `index` of the stream keyed by `seed`.
CK_HD Philox4 philox_block(std::uint64_t seed, std::uint64_t index) {
  Philox4 ctr{{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u}};
  return philox4x32_10(ctr, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Where a sampling call reads its starting offset. Outside graph capture `offset_ptr` is
// null and `offset` is the value. For captured work the offset lives in device memory
// (`*offset_ptr`, rewritten before each replay) and `offset` is the call's position
// within the graph, so each replay draws fresh numbers.
struct PhiloxArgs {
  std::uint64_t seed;
  std::uint64_t offset;
  const std::uint64_t* offset_ptr;
};

CK_HD std::uint64_t philox_start(const PhiloxArgs& a) {
  return a.offset_ptr ? *a.offset_ptr + a.offset : a.offset;
}

// ---- uniform ----
// [0, 1) with 24 / 53 random bits (exact: no rounding can reach 1).
CK_HD float u01_f32(std::uint32_t x) { return static_cast<float>(x >> 8) * 5.9604644775390625e-8f; }
CK_HD double u01_f64(std::uint32_t lo, std::uint32_t hi) {
  std::uint64_t v = (static_cast<std::uint64_t>(hi) << 32) | lo;
  return static_cast<double>(v >> 11) * 1.1102230246251565404236316680908203125e-16;
}
// (0, 1]: used where a logarithm follows.
CK_HD float u01_open_f32(std::uint32_t x) {
  return static_cast<float>((x >> 8) + 1u) * 5.9604644775390625e-8f;
}
CK_HD double u01_open_f64(std::uint32_t lo, std::uint32_t hi) {
  std::uint64_t v = (static_cast<std::uint64_t>(hi) << 32) | lo;
  return static_cast<double>((v >> 11) + 1u) * 1.1102230246251565404236316680908203125e-16;
}

// ---- portable transcendental functions (arithmetic only, identical on host and device) --
template <class T> struct Bits;
template <> struct Bits<float> {
  using U = std::uint32_t;
  static constexpr int mant = 23, bias = 127;
  CK_HD static U to(float f) { return ops::f32_bits(f); }
  CK_HD static float from(U u) { return ops::bits_f32(u); }
};
template <> struct Bits<double> {
  using U = std::uint64_t;
  static constexpr int mant = 52, bias = 1023;
  CK_HD static U to(double f) { union { double d; U u; } v{f}; return v.u; }
  CK_HD static double from(U u) { union { U u; double d; } v{u}; return v.d; }
};

// Natural logarithm of x in (0, 1] (normal numbers): log(m * 2^e) = e ln2 + 2 atanh(s),
// s = (m-1)/(m+1), m in [sqrt(1/2), sqrt(2)), |s| < 0.172; atanh by its odd series.
template <class T>
CK_HD T portable_log(T x) {
  using B = Bits<T>;
  typename B::U u = B::to(x);
  int e = static_cast<int>(u >> B::mant) - B::bias;
  typename B::U mbits = (u & ((typename B::U(1) << B::mant) - 1)) | (typename B::U(B::bias) << B::mant);
  T m = B::from(mbits);  // [1, 2)
  if (m > T(1.4142135623730951)) { m = m * T(0.5); e += 1; }
  T s = (m - T(1)) / (m + T(1));
  T s2 = s * s;
  T p;
  if constexpr (sizeof(T) == 4) {
    p = T(2.0 / 11);
    p = p * s2 + T(2.0 / 9);
    p = p * s2 + T(2.0 / 7);
    p = p * s2 + T(2.0 / 5);
    p = p * s2 + T(2.0 / 3);
    p = p * s2 + T(2);
  } else {
    p = T(2.0 / 25);
    for (int k = 11; k >= 0; --k) p = p * s2 + T(2.0) / T(2 * k + 1);
  }
  return static_cast<T>(e) * T(0.6931471805599453) + s * p;
}

// sin and cos of x in [-pi/4, pi/4] by Taylor series (truncation < 1 ulp there).
template <class T>
CK_HD void portable_sincos_small(T x, T* s, T* c) {
  T x2 = x * x;
  T ps, pc;
  if constexpr (sizeof(T) == 4) {
    ps = T(-1.0 / 39916800);
    ps = ps * x2 + T(1.0 / 362880);
    ps = ps * x2 + T(-1.0 / 5040);
    ps = ps * x2 + T(1.0 / 120);
    ps = ps * x2 + T(-1.0 / 6);
    pc = T(1.0 / 479001600);
    pc = pc * x2 + T(-1.0 / 3628800);
    pc = pc * x2 + T(1.0 / 40320);
    pc = pc * x2 + T(-1.0 / 720);
    pc = pc * x2 + T(1.0 / 24);
    pc = pc * x2 + T(-0.5);
  } else {
    // 1/(2k+1)! and 1/(2k)! with alternating signs, k up to 9.
    ps = T(0); pc = T(0);
    T fs = T(1), fc = T(1);  // factorials
    T cs[10], cc[10];
    for (int k = 1; k <= 9; ++k) {
      fc = fc * T(2 * k - 1) * T(2 * k);
      fs = fs * T(2 * k) * T(2 * k + 1);
      cs[k] = (k % 2 ? T(-1) : T(1)) / fs;
      cc[k] = (k % 2 ? T(-1) : T(1)) / fc;
    }
    for (int k = 9; k >= 2; --k) { ps = (ps + cs[k]) * x2; pc = (pc + cc[k]) * x2; }
    ps = ps + cs[1];
    pc = pc + cc[1];
  }
  *s = x + x * x2 * ps;
  *c = T(1) + x2 * pc;
}

// sin and cos of 2*pi*u for u in [0, 1).
template <class T>
CK_HD void sincos_turns(T u, T* s, T* c) {
  T u4 = u * T(4);
  int q = static_cast<int>(u4);  // quadrant 0..3
  T f = u4 - static_cast<T>(q);  // [0, 1), exact
  T x = (f - T(0.5)) * T(1.5707963267948966);  // [-pi/4, pi/4)
  T sx, cx;
  portable_sincos_small(x, &sx, &cx);
  constexpr double kHalfSqrt2 = 0.70710678118654752440;
  T S = (cx + sx) * T(kHalfSqrt2);  // sin(pi/4 + x)
  T C = (cx - sx) * T(kHalfSqrt2);  // cos(pi/4 + x)
  switch (q & 3) {
    case 0: *c = C; *s = S; break;
    case 1: *c = -S; *s = C; break;
    case 2: *c = -C; *s = -S; break;
    default: *c = S; *s = -C; break;
  }
}

// Box-Muller: two standard normals from one (0,1] and one [0,1) uniform.
template <class T>
CK_HD void box_muller(T u_open, T u, T* n0, T* n1) {
  T r = std::sqrt(T(-2) * portable_log(u_open));
  T s, c;
  sincos_turns(u, &s, &c);
  *n0 = r * c;
  *n1 = r * s;
}

// ---- float32 normal: Box-Muller with the GPU's fast transcendental functions ----
// The float32 (and float16 / bfloat16) normal path. History (docs/performance.md, H200, 1 GiB):
// a bit-exact Box-Muller (division-free polynomials, 166 SASS instructions per Philox block)
// ran at 2.39 TB/s and a bit-exact 256-layer ziggurat with deferred rejections at 2.23 TB/s,
// against the 3.6 TB/s goal and ~4.2 TB/s for uniform_ (67 instructions per block). Both
// paid for results identical to the emulated CPU. This one does not: on the GPU the log,
// square root, sine and cosine are the special-function unit's approximations (lg2.approx,
// sqrt.approx, sin.approx, cos.approx: one MUFU instruction each, ~2^-22 absolute error),
// so a Philox block costs about 20 instructions on top of the Philox rounds. The emulated
// backend runs the same transform on the same Philox words with the C library's float
// functions: identical distribution, identical seed/offset semantics (a call still consumes
// ceil(n / 4) blocks), values within ~1e-5 of the GPU's (float32) but not bit-identical.
//
// Per block: normals 0, 1 from words 0 (radius) and 1 (angle); normals 2, 3 from words 2, 3.
// The radius uniform is x * 2^-32 + 2^-33 in (0, 1] (torch's curand uniform), so the largest
// |normal| is sqrt(-2 ln 2^-33) = 6.76 (probability beyond it ~1e-11); the angle uniform takes
// the top 23 bits of its word through the exponent trick (no conversion instruction).
CK_HD float fma32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

CK_HD float bm_radius_uniform(std::uint32_t x) {
  return fma32(static_cast<float>(x), 2.3283064365386963e-10f, 1.1641532182693481e-10f);
}
CK_HD float bm_angle_uniform(std::uint32_t x) {  // [0, 1)
  return ops::bits_f32((x >> 9) | 0x3f800000u) - 1.0f;
}

// Two standard normals from one Philox word pair.
CK_HD void bm_pair_f32(std::uint32_t xr, std::uint32_t xa, float* n0, float* n1) {
  constexpr float kMinus2Ln2 = -1.3862943611198906f;  // -2 ln 2: -2 ln u = -2 ln2 * log2 u
  constexpr float kTwoPi = 6.2831853071795865f;
  const float u = bm_radius_uniform(xr);
  const float t = bm_angle_uniform(xa) * kTwoPi;
#if defined(__CUDA_ARCH__)
  float l2, r, sn, cs;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(l2) : "f"(u));
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(l2 * kMinus2Ln2));
  asm("sin.approx.ftz.f32 %0, %1;" : "=f"(sn) : "f"(t));
  asm("cos.approx.ftz.f32 %0, %1;" : "=f"(cs) : "f"(t));
#else
  const float r = std::sqrt(std::log2(u) * kMinus2Ln2);
  const float sn = std::sin(t), cs = std::cos(t);
#endif
  *n0 = r * cs;
  *n1 = r * sn;
}

// ---- per-block samplers (one Philox block -> 4 floats or 2 doubles) ----
// `bits` random bits per value: 24 for float32; 11 / 8 for float16 / bfloat16 so that
// u < 1 stays < 1 after rounding to the narrow type (no sample equals `to` for [0, 1)).
CK_HD void uniform4_f32(Philox4 b, float from, float span, float out[4], int bits = 24) {
  // scale is a power of two, so v * scale * span == v * (scale * span) exactly: one multiply.
  const float s = (1.0f / static_cast<float>(1u << bits)) * span;
  for (int k = 0; k < 4; ++k) out[k] = from + static_cast<float>(b.v[k] >> (32 - bits)) * s;
}
CK_HD void uniform2_f64(Philox4 b, double from, double span, double out[2]) {
  out[0] = from + u01_f64(b.v[0], b.v[1]) * span;
  out[1] = from + u01_f64(b.v[2], b.v[3]) * span;
}
// mean + std * N(0,1) for the four words of one Philox block (fma: one rounding).
CK_HD void normal4_f32(Philox4 b, float mean, float std, float out[4]) {
  float z[4];
  bm_pair_f32(b.v[0], b.v[1], &z[0], &z[1]);
  bm_pair_f32(b.v[2], b.v[3], &z[2], &z[3]);
  for (int k = 0; k < 4; ++k) out[k] = fma32(z[k], std, mean);
}
CK_HD void normal2_f64(Philox4 b, double mean, double std, double out[2]) {
  double n0, n1;
  box_muller(u01_open_f64(b.v[0], b.v[1]), u01_f64(b.v[2], b.v[3]), &n0, &n1);
  out[0] = mean + n0 * std;
  out[1] = mean + n1 * std;
}

// Distribution codes for the sampling executors.
enum Dist : int { kUniform = 0, kNormal = 1, kRandint = 2 };

struct SampleArgs {
  void* out;            // contiguous output
  std::int64_t n;
  int dtype;            // ops::DTypeCode
  int dist;             // Dist
  double a, b;          // uniform: from, to-from | normal: mean, std
  std::int64_t low;     // randint: [low, low + range)
  std::uint64_t range;
  PhiloxArgs philox;
  // philox_keys(philox.seed), filled by the caller. The float32 fast kernels read the
  // round keys straight from the parameter bank (an operand of each XOR), which keeps 20
  // registers free for the unrolled loop; the other paths derive keys from the seed.
  PhiloxKeys keys;
};

// Elements produced per Philox block for this call's dtype/distribution.
CK_HD int per_block(int dtype, int dist, std::uint64_t range) {
  if (dist == kRandint) return range > 0xffffffffull ? 2 : 4;
  return dtype == ops::kFloat64 ? 2 : 4;
}

template <class T>
CK_HD void store_sample(void* out, std::int64_t i, T v) {
  static_cast<T*>(out)[i] = v;
}

// Writes the (up to 4) elements that Philox block `blk` of this call produces. Used by
// both executors; GPU kernels add vectorized fast paths for the common case.
CK_HD void sample_block(const SampleArgs& a, std::uint64_t base, std::int64_t blk) {
  Philox4 b = philox_block(a.philox.seed, base + static_cast<std::uint64_t>(blk));
  int pb = per_block(a.dtype, a.dist, a.range);
  std::int64_t i0 = blk * pb;
  int cnt = static_cast<int>((a.n - i0) < pb ? (a.n - i0) : pb);
  if (a.dist == kRandint) {
    for (int k = 0; k < cnt; ++k) {
      std::uint64_t r = pb == 4 ? (b.v[k] % a.range)
          : (((static_cast<std::uint64_t>(b.v[2 * k + 1]) << 32) | b.v[2 * k]) % a.range);
      std::int64_t v = static_cast<std::int64_t>(static_cast<std::uint64_t>(a.low) + r);
      switch (a.dtype) {
        case ops::kUInt8: store_sample(a.out, i0 + k, static_cast<std::uint8_t>(v)); break;
        case ops::kInt8: store_sample(a.out, i0 + k, static_cast<std::int8_t>(v)); break;
        case ops::kInt16: store_sample(a.out, i0 + k, static_cast<std::int16_t>(v)); break;
        case ops::kInt32: store_sample(a.out, i0 + k, static_cast<std::int32_t>(v)); break;
        case ops::kInt64: store_sample(a.out, i0 + k, v); break;
        case ops::kFloat16: store_sample(a.out, i0 + k, ops::Half::from_float(static_cast<float>(v))); break;
        case ops::kBFloat16: store_sample(a.out, i0 + k, ops::BFloat16::from_float(static_cast<float>(v))); break;
        case ops::kFloat32: store_sample(a.out, i0 + k, static_cast<float>(v)); break;
        default: store_sample(a.out, i0 + k, static_cast<double>(v)); break;
      }
    }
    return;
  }
  if (a.dtype == ops::kFloat64) {
    double v[2];
    if (a.dist == kUniform) uniform2_f64(b, a.a, a.b, v); else normal2_f64(b, a.a, a.b, v);
    for (int k = 0; k < cnt; ++k) store_sample(a.out, i0 + k, v[k]);
    return;
  }
  float v[4];
  if (a.dist == kUniform) {
    int bits = a.dtype == ops::kFloat16 ? 11 : (a.dtype == ops::kBFloat16 ? 8 : 24);
    uniform4_f32(b, static_cast<float>(a.a), static_cast<float>(a.b), v, bits);
  } else {
    normal4_f32(b, static_cast<float>(a.a), static_cast<float>(a.b), v);
  }
  for (int k = 0; k < cnt; ++k) {
    switch (a.dtype) {
      case ops::kFloat16: store_sample(a.out, i0 + k, ops::Half::from_float(v[k])); break;
      case ops::kBFloat16: store_sample(a.out, i0 + k, ops::BFloat16::from_float(v[k])); break;
      default: store_sample(a.out, i0 + k, v[k]); break;
    }
  }
}

}  // namespace cudakit::rng
