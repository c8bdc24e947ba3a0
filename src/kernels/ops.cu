// Built-in elementwise (arithmetic, comparisons, pow), cast, fill and sum kernels. The arithmetic lives in
// src/kernels/elementwise.hpp, shared with the CPU executor; this file only adds the
// GPU iteration: grid-stride loops, 16-byte vector accesses on the contiguous fast path.
// Kernels are extern "C" so the host finds them by name in the embedded fatbin.
#include <cstdint>

#include "kernels/compare_pow.hpp"
#include "kernels/elementwise.hpp"

using namespace cudakit::ops;

namespace {

template <class T>
inline constexpr int kVecWidth = sizeof(T) >= 16 ? 1 : 16 / static_cast<int>(sizeof(T));

template <class T, int V>
struct alignas(16) Vec { T v[V]; };

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

__device__ __forceinline__ std::int64_t gtid() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t gstride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

// out = f(x) over the tensor operand of a BinaryArgs whose other operand is its scalar
// `value`: the same 16-byte vector fast path as two-tensor arithmetic, one load per element.
template <class TO, class TI, int V, class F>
__device__ void map_a(const BinaryArgs& a, F f) {
  TO* out = static_cast<TO*>(a.out);
  const TI* x = static_cast<const TI*>(a.a);
  if (a.contiguous) {
    std::int64_t i0 = 0;
    if (V > 1 && aligned16(out) && aligned16(x)) {
      std::int64_t nv = a.n / V;
      for (std::int64_t i = gtid(); i < nv; i += gstride()) {
        Vec<TI, V> vx = reinterpret_cast<const Vec<TI, V>*>(x)[i];
        Vec<TO, V> vo;
#pragma unroll
        for (int k = 0; k < V; ++k) vo.v[k] = f(vx.v[k]);
        reinterpret_cast<Vec<TO, V>*>(out)[i] = vo;
      }
      i0 = nv * V;
    }
    for (std::int64_t i = i0 + gtid(); i < a.n; i += gstride()) out[i] = f(x[i]);
    return;
  }
  std::int64_t off[3];
  for (std::int64_t i = gtid(); i < a.n; i += gstride()) {
    a.calc.get(i, off);
    out[off[0]] = f(x[off[1]]);
  }
}

// f(x, s) or f(s, x) with the scalar operand s read once from the argument block.
template <class TO, class T, int V, class F>
__device__ void scalar_kernel(const BinaryArgs& a, F f) {
  using C = compute_type<T>;
  const C s = scalar_get<C>(a.value);
  if (a.scalar == kScalarOther) map_a<TO, T, V>(a, [&](T x) { return f(load_c(x), s); });
  else map_a<TO, T, V>(a, [&](T x) { return f(s, load_c(x)); });
}

template <class T>
__device__ void binary_kernel(const BinaryArgs& a) {
  using C = compute_type<T>;
  if (a.scalar != kNoScalar) {
    const int op = a.op;
    scalar_kernel<T, T, kVecWidth<T>>(a, [op](C x, C y) { return store_c<T>(binary_apply<C>(op, x, y)); });
    return;
  }
  T* out = static_cast<T*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  const T* y = static_cast<const T*>(a.b);
  if (a.contiguous) {
    constexpr int V = kVecWidth<T>;
    std::int64_t i0 = 0;
    if (V > 1 && aligned16(out) && aligned16(x) && aligned16(y)) {
      std::int64_t nv = a.n / V;
      for (std::int64_t i = gtid(); i < nv; i += gstride()) {
        Vec<T, V> vx = reinterpret_cast<const Vec<T, V>*>(x)[i];
        Vec<T, V> vy = reinterpret_cast<const Vec<T, V>*>(y)[i];
        Vec<T, V> vo;
#pragma unroll
        for (int k = 0; k < V; ++k) vo.v[k] = store_c<T>(binary_apply<C>(a.op, load_c(vx.v[k]), load_c(vy.v[k])));
        reinterpret_cast<Vec<T, V>*>(out)[i] = vo;
      }
      i0 = nv * V;
    }
    for (std::int64_t i = i0 + gtid(); i < a.n; i += gstride())
      out[i] = store_c<T>(binary_apply<C>(a.op, load_c(x[i]), load_c(y[i])));
    return;
  }
  std::int64_t off[3];
  for (std::int64_t i = gtid(); i < a.n; i += gstride()) {
    a.calc.get(i, off);
    out[off[0]] = store_c<T>(binary_apply<C>(a.op, load_c(x[off[1]]), load_c(y[off[2]])));
  }
}

template <class T>
__device__ void unary_kernel(const UnaryArgs& a) {
  using C = compute_type<T>;
  T* out = static_cast<T*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  if (a.contiguous) {
    constexpr int V = kVecWidth<T>;
    std::int64_t i0 = 0;
    if (V > 1 && aligned16(out) && aligned16(x)) {
      std::int64_t nv = a.n / V;
      for (std::int64_t i = gtid(); i < nv; i += gstride()) {
        Vec<T, V> vx = reinterpret_cast<const Vec<T, V>*>(x)[i];
        Vec<T, V> vo;
#pragma unroll
        for (int k = 0; k < V; ++k) vo.v[k] = store_c<T>(unary_apply<C>(a.op, load_c(vx.v[k])));
        reinterpret_cast<Vec<T, V>*>(out)[i] = vo;
      }
      i0 = nv * V;
    }
    for (std::int64_t i = i0 + gtid(); i < a.n; i += gstride())
      out[i] = store_c<T>(unary_apply<C>(a.op, load_c(x[i])));
    return;
  }
  std::int64_t off[2];
  for (std::int64_t i = gtid(); i < a.n; i += gstride()) {
    a.calc.get(i, off);
    out[off[0]] = store_c<T>(unary_apply<C>(a.op, load_c(x[off[1]])));
  }
}

// Comparisons (bool output) and pow: strided loop with a direct-index fast path; the
// arithmetic is src/kernels/compare_pow.hpp, shared with the CPU executor.
template <class T>
__device__ void compare_kernel(const BinaryArgs& a) {
  using C = compute_type<T>;
  const int op = a.op;
  if (a.scalar != kNoScalar) {
    scalar_kernel<bool, T, 1>(a, [op](C x, C y) { return compare_apply<C>(op, x, y); });
    return;
  }
  bool* out = static_cast<bool*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  const T* y = static_cast<const T*>(a.b);
  if (a.contiguous) {
    for (std::int64_t i = gtid(); i < a.n; i += gstride())
      out[i] = compare_apply<C>(op, load_c(x[i]), load_c(y[i]));
    return;
  }
  std::int64_t off[3];
  for (std::int64_t i = gtid(); i < a.n; i += gstride()) {
    a.calc.get(i, off);
    out[off[0]] = compare_apply<C>(op, load_c(x[off[1]]), load_c(y[off[2]]));
  }
}

template <class T>
__device__ void pow_kernel(const BinaryArgs& a) {
  using C = compute_type<T>;
  if (a.scalar != kNoScalar) {
    scalar_kernel<T, T, 1>(a, [](C x, C y) { return store_c<T>(pow_apply<C>(x, y)); });
    return;
  }
  T* out = static_cast<T*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  const T* y = static_cast<const T*>(a.b);
  if (a.contiguous) {
    for (std::int64_t i = gtid(); i < a.n; i += gstride())
      out[i] = store_c<T>(pow_apply<C>(load_c(x[i]), load_c(y[i])));
    return;
  }
  std::int64_t off[3];
  for (std::int64_t i = gtid(); i < a.n; i += gstride()) {
    a.calc.get(i, off);
    out[off[0]] = store_c<T>(pow_apply<C>(load_c(x[off[1]]), load_c(y[off[2]])));
  }
}

template <class T>
__device__ void arange_kernel(const ArangeArgs& a) {
  T* out = static_cast<T*>(a.out);
  for (std::int64_t i = gtid(); i < a.n; i += gstride()) out[i] = arange_value<T>(a, i);
}

__device__ __forceinline__ int code_size(int code) {
  switch (code) {
    case kBool: case kUInt8: case kInt8: return 1;
    case kInt16: case kFloat16: case kBFloat16: return 2;
    case kInt32: case kFloat32: return 4;
    case kComplex128: return 16;
    default: return 8;
  }
}

template <class T>
__device__ void cast_kernel(const CastArgs& a) {
  T* out = static_cast<T*>(a.out);
  const unsigned char* in = static_cast<const unsigned char*>(a.a);
  const int es = code_size(a.src_code);
  if (a.contiguous) {
    for (std::int64_t i = gtid(); i < a.n; i += gstride()) out[i] = load_as<T>(in + i * es, a.src_code);
    return;
  }
  std::int64_t off[2];
  for (std::int64_t i = gtid(); i < a.n; i += gstride()) {
    a.calc.get(i, off);
    out[off[0]] = load_as<T>(in + off[1] * es, a.src_code);
  }
}

template <int ES>
struct Elem { unsigned char b[ES]; };
template <> struct alignas(2) Elem<2> { std::uint16_t v; };
template <> struct alignas(4) Elem<4> { std::uint32_t v; };
template <> struct alignas(8) Elem<8> { std::uint64_t v; };
template <> struct alignas(16) Elem<16> { std::uint64_t v[2]; };

template <int ES>
__device__ void fill_kernel(const FillArgs& a) {
  using E = Elem<ES>;
  E val;
  memcpy(&val, a.value, ES);
  E* out = static_cast<E*>(a.out);
  if (a.contiguous) {
    constexpr int V = 16 / ES;
    std::int64_t i0 = 0;
    if (V > 1 && aligned16(out)) {
      Vec<E, V> vv;
#pragma unroll
      for (int k = 0; k < V; ++k) vv.v[k] = val;
      std::int64_t nv = a.n / V;
      for (std::int64_t i = gtid(); i < nv; i += gstride()) reinterpret_cast<Vec<E, V>*>(out)[i] = vv;
      i0 = nv * V;
    }
    for (std::int64_t i = i0 + gtid(); i < a.n; i += gstride()) out[i] = val;
    return;
  }
  std::int64_t off[1];
  for (std::int64_t i = gtid(); i < a.n; i += gstride()) {
    a.calc.get(i, off);
    out[off[0]] = val;
  }
}

// ---- sum ----
template <class T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
template <> struct Acc<Complex64> { using type = Complex64; };
template <> struct Acc<Complex128> { using type = Complex128; };
#define CK_INT_ACC(T) template <> struct Acc<T> { using type = std::int64_t; };
CK_INT_ACC(bool) CK_INT_ACC(std::uint8_t) CK_INT_ACC(std::int8_t) CK_INT_ACC(std::int16_t)
CK_INT_ACC(std::int32_t) CK_INT_ACC(std::int64_t)

template <class A> __device__ __forceinline__ A acc_zero() {
  if constexpr (is_complex_t<A>::value) return A{0, 0}; else return A(0);
}
template <class A> __device__ __forceinline__ A acc_add(A x, A y) {
  if constexpr (is_complex_t<A>::value) return A{x.re + y.re, x.im + y.im};
  else if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<std::uint64_t>(x) + static_cast<std::uint64_t>(y));
  else return x + y;
}
template <class T, class A> __device__ __forceinline__ A to_acc(T v) {
  if constexpr (is_complex_t<T>::value) return v;
  else if constexpr (std::is_integral_v<A>) return static_cast<A>(v);
  else return static_cast<A>(load_c(v));
}

template <class A>
__device__ A block_reduce(A v) {
  __shared__ alignas(16) unsigned char smem_raw[256 * sizeof(A)];
  A* smem = reinterpret_cast<A*>(smem_raw);
  smem[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] = acc_add(smem[threadIdx.x], smem[threadIdx.x + s]);
    __syncthreads();
  }
  return smem[0];
}

template <class T>
__device__ void sum_partial(const void* in, const OffsetCalc<1>& calc, std::int64_t n, void* partials) {
  using A = typename Acc<T>::type;
  const T* x = static_cast<const T*>(in);
  A acc = acc_zero<A>();
  constexpr int V = kVecWidth<T>;
  if (V > 1 && calc.ndim == 1 && calc.strides[0][0] == 1 && aligned16(x)) {
    // Dense input: 16-byte loads, four in flight per thread before the first use (one per
    // iteration left each thread waiting a full memory latency per 16 bytes), each into its
    // own accumulator, then the remaining vectors and the scalar tail.
    const std::int64_t nv = n / V;
    const std::int64_t stride = gstride();
    const Vec<T, V>* xv = reinterpret_cast<const Vec<T, V>*>(x);
    constexpr int U = 4;
    A part[U];
#pragma unroll
    for (int u = 0; u < U; ++u) part[u] = acc_zero<A>();
    std::int64_t i = gtid();
    for (; i + (U - 1) * stride < nv; i += U * stride) {
      Vec<T, V> v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = xv[i + u * stride];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k) part[u] = acc_add(part[u], to_acc<T, A>(v[u].v[k]));
    }
    for (; i < nv; i += stride) {
      Vec<T, V> v = xv[i];
#pragma unroll
      for (int k = 0; k < V; ++k) acc = acc_add(acc, to_acc<T, A>(v.v[k]));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc = acc_add(acc, part[u]);
    for (std::int64_t i = nv * V + gtid(); i < n; i += gstride()) acc = acc_add(acc, to_acc<T, A>(x[i]));
  } else {
    std::int64_t off[1];
    for (std::int64_t i = gtid(); i < n; i += gstride()) {
      calc.get(i, off);
      acc = acc_add(acc, to_acc<T, A>(x[off[0]]));
    }
  }
  A r = block_reduce(acc);
  if (threadIdx.x == 0) static_cast<A*>(partials)[blockIdx.x] = r;
}

template <class T>
__device__ void sum_final(const void* partials, int count, void* out) {
  using A = typename Acc<T>::type;
  A acc = acc_zero<A>();
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc = acc_add(acc, static_cast<const A*>(partials)[i]);
  A r = block_reduce(acc);
  if (threadIdx.x == 0) {
    if constexpr (std::is_integral_v<A>) *static_cast<std::int64_t*>(out) = r;
    else *static_cast<T*>(out) = convert<T>(r);
  }
}

// ---- contiguous fast paths: one tile per block ----
// Each block of kTileThreads threads maps one tile of kTileThreads x kTileVecs 16-byte
// vectors (on the wider of the two types; 16 KiB of float32) and exits; the grid covers the
// tensor (host: tile_grid in src/ops/cuda_kernels.cpp), so the hardware hands tiles out in
// address order to whichever SM has room. The earlier one-wave grid-stride loop (H200, 1 GiB
// fp32: relu 3.96, add 4.03 TB/s against torch's tile-per-block 4.23 / 4.33, and fill 4.24
// against 4.62) lets the SMs drift apart over ~250 iterations, spreading the accesses in
// flight over more of memory than a tight window of consecutive tiles.
// Inside a tile: consecutive threads take consecutive vectors (warp accesses coalesced),
// each thread's kTileVecs loads are all issued before the first use, and offsets are 32-bit
// from the tile's base (one 64-bit multiply per block).
// The host checks 16-byte alignment of every pointer before choosing these kernels.
constexpr int kTileThreads = 256;  // = the host's kBlock
constexpr int kTileVecs = 4;       // = the host's kTileVecs

template <class T, int N>
struct alignas((N * sizeof(T)) >= 16 ? 16 : (N * sizeof(T))) Pack { T v[N]; };

template <class S, class D>
struct TileShape {
  static constexpr int M = sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D);
  static constexpr int V = 16 / M;  // elements per vector
};

__device__ __forceinline__ std::int64_t tile_first_vec() {
  return static_cast<std::int64_t>(blockIdx.x) * (kTileThreads * kTileVecs);
}

// out[i] = f(x[i]) (S -> D).
template <class S, class D, class F>
__device__ __forceinline__ void tile_map(const S* __restrict__ x, D* __restrict__ out, std::int64_t n, F f) {
  constexpr int V = TileShape<S, D>::V;
  using VS = Pack<S, V>;
  using VD = Pack<D, V>;
  const std::int64_t nv = n / V;
  const std::int64_t base = tile_first_vec();
  const VS* xv = reinterpret_cast<const VS*>(x) + base + threadIdx.x;
  VD* ov = reinterpret_cast<VD*>(out) + base + threadIdx.x;
  const std::int64_t left = nv - base - threadIdx.x;  // vectors from this thread's first on
  if (left > (kTileVecs - 1) * kTileThreads) {  // the whole tile: no bounds checks
    VS in[kTileVecs];
#pragma unroll
    for (int u = 0; u < kTileVecs; ++u) in[u] = xv[u * kTileThreads];
#pragma unroll
    for (int u = 0; u < kTileVecs; ++u) {
      VD o;
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = f(in[u].v[k]);
      ov[u * kTileThreads] = o;
    }
  } else {
#pragma unroll
    for (int u = 0; u < kTileVecs; ++u) {
      if (u * kTileThreads < left) {
        const VS in = xv[u * kTileThreads];
        VD o;
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = f(in.v[k]);
        ov[u * kTileThreads] = o;
      }
    }
  }
  if (blockIdx.x == gridDim.x - 1)  // the n % V elements after the last vector
    for (std::int64_t j = nv * V + threadIdx.x; j < n; j += kTileThreads) out[j] = f(x[j]);
}

// out[i] = f(x[i], y[i]), one type.
template <class T, class F>
__device__ __forceinline__ void tile_zip(const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ out,
                                         std::int64_t n, F f) {
  constexpr int V = TileShape<T, T>::V;
  using VT = Pack<T, V>;
  const std::int64_t nv = n / V;
  const std::int64_t base = tile_first_vec();
  const VT* xv = reinterpret_cast<const VT*>(x) + base + threadIdx.x;
  const VT* yv = reinterpret_cast<const VT*>(y) + base + threadIdx.x;
  VT* ov = reinterpret_cast<VT*>(out) + base + threadIdx.x;
  const std::int64_t left = nv - base - threadIdx.x;
  if (left > (kTileVecs - 1) * kTileThreads) {
    VT a[kTileVecs], b[kTileVecs];
#pragma unroll
    for (int u = 0; u < kTileVecs; ++u) {
      a[u] = xv[u * kTileThreads];
      b[u] = yv[u * kTileThreads];
    }
#pragma unroll
    for (int u = 0; u < kTileVecs; ++u) {
      VT o;
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = f(a[u].v[k], b[u].v[k]);
      ov[u * kTileThreads] = o;
    }
  } else {
#pragma unroll
    for (int u = 0; u < kTileVecs; ++u) {
      if (u * kTileThreads < left) {
        const VT a = xv[u * kTileThreads], b = yv[u * kTileThreads];
        VT o;
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = f(a.v[k], b.v[k]);
        ov[u * kTileThreads] = o;
      }
    }
  }
  if (blockIdx.x == gridDim.x - 1)
    for (std::int64_t j = nv * V + threadIdx.x; j < n; j += kTileThreads) out[j] = f(x[j], y[j]);
}

// Contiguous binary arithmetic (tensor-tensor or tensor-number): the op is uniform, so it is
// chosen once here and each loop body is one operation.
template <class T, int Op>
__device__ __forceinline__ void binary_contig_op(const BinaryArgs& a) {
  using C = compute_type<T>;
  T* out = static_cast<T*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  if (a.scalar == kNoScalar) {
    tile_zip(x, static_cast<const T*>(a.b), out, a.n,
             [](T p, T q) { return store_c<T>(binary_apply<C>(Op, load_c(p), load_c(q))); });
    return;
  }
  const C s = scalar_get<C>(a.value);
  if (a.scalar == kScalarOther) tile_map(x, out, a.n, [s](T p) { return store_c<T>(binary_apply<C>(Op, load_c(p), s)); });
  else tile_map(x, out, a.n, [s](T p) { return store_c<T>(binary_apply<C>(Op, s, load_c(p))); });
}

template <class T>
__device__ void binary_contig(const BinaryArgs& a) {
  switch (a.op) {
    case kAdd: binary_contig_op<T, kAdd>(a); break;
    case kSub: binary_contig_op<T, kSub>(a); break;
    case kMul: binary_contig_op<T, kMul>(a); break;
    default: binary_contig_op<T, kDiv>(a); break;
  }
}

// Contiguous fill, one tile per block (only stores: kTileVecs 16-byte stores per thread).
template <int ES>
__device__ void fill_contig(const FillArgs& a) {
  using E = Elem<ES>;
  E val;
  memcpy(&val, a.value, ES);
  constexpr int V = 16 / ES;
  using VE = Pack<E, V>;
  VE vv;
#pragma unroll
  for (int k = 0; k < V; ++k) vv.v[k] = val;
  E* out = static_cast<E*>(a.out);
  const std::int64_t nv = a.n / V;
  const std::int64_t base = tile_first_vec();
  VE* ov = reinterpret_cast<VE*>(out) + base + threadIdx.x;
  const std::int64_t left = nv - base - threadIdx.x;
#pragma unroll
  for (int u = 0; u < kTileVecs; ++u)
    if (u * kTileThreads < left) ov[u * kTileThreads] = vv;
  if (blockIdx.x == gridDim.x - 1)
    for (std::int64_t j = nv * V + threadIdx.x; j < a.n; j += kTileThreads) out[j] = val;
}

template <class T>
__device__ void unary_contig(void* out, const void* x, std::int64_t n, int op) {
  using C = compute_type<T>;
  const T* in = static_cast<const T*>(x);
  T* o = static_cast<T*>(out);
  // The op is uniform: branch once, outside the loop.
  if (op == kNeg) tile_map(in, o, n, [](T v) { return store_c<T>(unary_apply<C>(kNeg, load_c(v))); });
  else tile_map(in, o, n, [](T v) { return store_c<T>(unary_apply<C>(kRelu, load_c(v))); });
}

template <class S> __device__ __forceinline__ auto load_value(S v) {
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) return v.to_float();
  else return v;
}

template <class D, class S>
__device__ void cast_contig(void* out, const void* x, std::int64_t n) {
  tile_map(static_cast<const S*>(x), static_cast<D*>(out), n, [](S v) { return convert<D>(load_value(v)); });
}

}  // namespace

#define CK_FOR_EACH_DTYPE(X) \
  X(b8, bool) X(u8, std::uint8_t) X(i8, std::int8_t) X(i16, std::int16_t) X(i32, std::int32_t) \
  X(i64, std::int64_t) X(f16, Half) X(bf16, BFloat16) X(f32, float) X(f64, double)            \
  X(c64, Complex64) X(c128, Complex128)

#define CK_DEFINE(sfx, T)                                                                       \
  extern "C" __global__ void __launch_bounds__(256) ck_binary_##sfx(BinaryArgs a) { binary_kernel<T>(a); } \
  extern "C" __global__ void __launch_bounds__(256) ck_unary_##sfx(UnaryArgs a) { unary_kernel<T>(a); }    \
  extern "C" __global__ void __launch_bounds__(256) ck_cast_##sfx(CastArgs a) { cast_kernel<T>(a); }       \
  extern "C" __global__ void __launch_bounds__(256) ck_compare_##sfx(BinaryArgs a) { compare_kernel<T>(a); } \
  extern "C" __global__ void __launch_bounds__(256) ck_pow_##sfx(BinaryArgs a) { pow_kernel<T>(a); }       \
  extern "C" __global__ void __launch_bounds__(256) ck_arange_##sfx(ArangeArgs a) { arange_kernel<T>(a); } \
  extern "C" __global__ void __launch_bounds__(256) ck_sum_partial_##sfx(                       \
      const void* in, OffsetCalc<1> calc, std::int64_t n, void* partials) {                     \
    sum_partial<T>(in, calc, n, partials);                                                       \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(256) ck_sum_final_##sfx(const void* p, int count, void* out) { \
    sum_final<T>(p, count, out);                                                                 \
  }
CK_FOR_EACH_DTYPE(CK_DEFINE)

extern "C" __global__ void __launch_bounds__(256) ck_fill_1(FillArgs a) { fill_kernel<1>(a); }
extern "C" __global__ void __launch_bounds__(256) ck_fill_2(FillArgs a) { fill_kernel<2>(a); }
extern "C" __global__ void __launch_bounds__(256) ck_fill_4(FillArgs a) { fill_kernel<4>(a); }
extern "C" __global__ void __launch_bounds__(256) ck_fill_8(FillArgs a) { fill_kernel<8>(a); }
extern "C" __global__ void __launch_bounds__(256) ck_fill_16(FillArgs a) { fill_kernel<16>(a); }
extern "C" __global__ void __launch_bounds__(kTileThreads) ck_fillc_1(FillArgs a) { fill_contig<1>(a); }
extern "C" __global__ void __launch_bounds__(kTileThreads) ck_fillc_2(FillArgs a) { fill_contig<2>(a); }
extern "C" __global__ void __launch_bounds__(kTileThreads) ck_fillc_4(FillArgs a) { fill_contig<4>(a); }
extern "C" __global__ void __launch_bounds__(kTileThreads) ck_fillc_8(FillArgs a) { fill_contig<8>(a); }
extern "C" __global__ void __launch_bounds__(kTileThreads) ck_fillc_16(FillArgs a) { fill_contig<16>(a); }

// Contiguous fast paths (real dtypes), one tile per block: ck_unaryc_<t>, ck_binaryc_<t>,
// ck_castc_<dst>_<src>; grid = tiles (src/ops/cuda_kernels.cpp, tile_grid).
#define CK_FOR_EACH_REAL(X) \
  X(b8, bool) X(u8, std::uint8_t) X(i8, std::int8_t) X(i16, std::int16_t) X(i32, std::int32_t) \
  X(i64, std::int64_t) X(f16, Half) X(bf16, BFloat16) X(f32, float) X(f64, double)

#define CK_DEFINE_UNARYC(sfx, T)                                                                  \
  extern "C" __global__ void __launch_bounds__(kTileThreads) ck_unaryc_##sfx(                     \
      void* out, const void* x, std::int64_t n, int op) { unary_contig<T>(out, x, n, op); }        \
  extern "C" __global__ void __launch_bounds__(kTileThreads) ck_binaryc_##sfx(BinaryArgs a) { binary_contig<T>(a); }
CK_FOR_EACH_REAL(CK_DEFINE_UNARYC)

#define CK_DEFINE_CASTC_SRC(ssfx, S, dsfx, D)                                                     \
  extern "C" __global__ void __launch_bounds__(kTileThreads) ck_castc_##dsfx##_##ssfx(           \
      void* out, const void* x, std::int64_t n) { cast_contig<D, S>(out, x, n); }
#define CK_DEFINE_CASTC_DST(dsfx, D)                                                              \
  CK_DEFINE_CASTC_SRC(b8, bool, dsfx, D) CK_DEFINE_CASTC_SRC(u8, std::uint8_t, dsfx, D)          \
  CK_DEFINE_CASTC_SRC(i8, std::int8_t, dsfx, D) CK_DEFINE_CASTC_SRC(i16, std::int16_t, dsfx, D)  \
  CK_DEFINE_CASTC_SRC(i32, std::int32_t, dsfx, D) CK_DEFINE_CASTC_SRC(i64, std::int64_t, dsfx, D) \
  CK_DEFINE_CASTC_SRC(f16, Half, dsfx, D) CK_DEFINE_CASTC_SRC(bf16, BFloat16, dsfx, D)           \
  CK_DEFINE_CASTC_SRC(f32, float, dsfx, D) CK_DEFINE_CASTC_SRC(f64, double, dsfx, D)
CK_FOR_EACH_REAL(CK_DEFINE_CASTC_DST)
