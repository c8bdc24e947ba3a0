// Standalone check + timing of the one-tile-per-block contiguous kernels (src/kernels/ops.cu:
// ck_binaryc_*, ck_unaryc_*, ck_castc_*, ck_fillc_*) and of the unrolled sum, on one GPU,
// without the library. Every size class a tile can end in (whole tiles, a partial tile, a
// partial vector, fewer elements than one vector) is compared element for element with the
// host's arithmetic (exact for these ops), with the output poisoned first. Then 1 GiB float32
// of each is timed (median of 20, rotating over 4 buffer sets so that nothing is served from
// L2), beside a device-to-device cudaMemcpy and the previous design (a one-wave grid-stride
// relu, 4 vectors in flight per thread) for reference, in TB/s counting bytes read + written.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -arch=sm_90 -Isrc -Iinclude \
//        -o /tmp/elementwise_check bench/tensor/elementwise_check.cu && /tmp/elementwise_check
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/ops.cu"

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

// The previous contiguous design, for the timing comparison only.
__global__ void __launch_bounds__(256, 4) old_relu(const float4* __restrict__ x, float4* __restrict__ out, std::int64_t nv) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  auto r = [](float v) { return v > 0 ? v : (v != v ? v : 0.0f); };
  for (; i + 3 * stride < nv; i += 4 * stride) {
    float4 in[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) in[u] = x[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u) out[i + u * stride] = make_float4(r(in[u].x), r(in[u].y), r(in[u].z), r(in[u].w));
  }
  for (; i < nv; i += stride) out[i] = make_float4(r(x[i].x), r(x[i].y), r(x[i].z), r(x[i].w));
}

unsigned tiles(std::int64_t n, int elem) {
  const std::int64_t per_vec = 16 / elem, per_tile = 256 * 4;
  return static_cast<unsigned>(std::max<std::int64_t>(1, (n / per_vec + per_tile - 1) / per_tile));
}

BinaryArgs binary_args(void* out, const void* a, const void* b, std::int64_t n, int op, int scalar, float value) {
  BinaryArgs args{};
  args.out = out;
  args.a = a;
  args.b = b;
  args.n = n;
  args.op = op;
  args.contiguous = 1;
  args.scalar = scalar;
  args.value.f32 = value;
  args.calc.ndim = 1;
  return args;
}

int failures = 0;

template <class T>
void expect_equal(const char* what, std::int64_t n, const std::vector<T>& want, const T* dev) {
  std::vector<T> got(static_cast<std::size_t>(n));
  CK(cudaMemcpy(got.data(), dev, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToHost));
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::memcmp(&want[static_cast<std::size_t>(i)], &got[static_cast<std::size_t>(i)], sizeof(T)) != 0) {
      ++failures;
      std::printf("FAIL %s n=%lld: first difference at %lld\n", what, static_cast<long long>(n), static_cast<long long>(i));
      return;
    }
  }
}

void check(std::int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(n)), y(x.size());
  std::uint32_t s = static_cast<std::uint32_t>(n) * 2654435761u + 1;
  for (std::size_t i = 0; i < x.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = static_cast<float>(static_cast<std::int32_t>(s)) * 1e-9f;
    s = s * 1664525u + 1013904223u;
    y[i] = static_cast<float>(static_cast<std::int32_t>(s)) * 1e-9f;
  }
  const std::size_t bytes = static_cast<std::size_t>(n) * 4 + 64;
  char *dx, *dy, *dout;
  CK(cudaMalloc(&dx, bytes));
  CK(cudaMalloc(&dy, bytes));
  CK(cudaMalloc(&dout, bytes));
  // 16 bytes past the allocation's start: aligned, but not at a tile boundary of memory.
  float* px = reinterpret_cast<float*>(dx + 16);
  float* py = reinterpret_cast<float*>(dy + 16);
  float* po = reinterpret_cast<float*>(dout + 16);
  CK(cudaMemcpy(px, x.data(), static_cast<std::size_t>(n) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(py, y.data(), static_cast<std::size_t>(n) * 4, cudaMemcpyHostToDevice));
  std::vector<float> want(x.size());
  auto poison = [&] { CK(cudaMemset(po, 0xff, static_cast<std::size_t>(n) * 4)); };
  const unsigned g = tiles(n, 4);
  for (int op : {static_cast<int>(kAdd), static_cast<int>(kMul), static_cast<int>(kSub), static_cast<int>(kDiv)}) {
    poison();
    ck_binaryc_f32<<<g, 256>>>(binary_args(po, px, py, n, op, kNoScalar, 0));
    CK(cudaGetLastError());
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = binary_apply<float>(op, x[i], y[i]);
    expect_equal("binary", n, want, po);
    poison();
    ck_binaryc_f32<<<g, 256>>>(binary_args(po, px, nullptr, n, op, kScalarSelf, 1.5f));
    CK(cudaGetLastError());
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = binary_apply<float>(op, 1.5f, x[i]);
    expect_equal("binary (number, tensor)", n, want, po);
  }
  for (int op : {static_cast<int>(kNeg), static_cast<int>(kRelu)}) {
    poison();
    ck_unaryc_f32<<<g, 256>>>(po, px, n, op);
    CK(cudaGetLastError());
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = unary_apply<float>(op, x[i]);
    expect_equal("unary", n, want, po);
  }
  {
    poison();
    ck_castc_f16_f32<<<g, 256>>>(po, px, n);
    CK(cudaGetLastError());
    std::vector<Half> wh(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) wh[i] = convert<Half>(x[i]);
    expect_equal("cast f32->f16", n, wh, reinterpret_cast<const Half*>(po));
  }
  {
    poison();
    FillArgs f{};
    f.out = po;
    f.n = n;
    f.contiguous = 1;
    const float v = 3.25f;
    std::memcpy(f.value, &v, 4);
    ck_fillc_4<<<g, 256>>>(f);
    CK(cudaGetLastError());
    std::fill(want.begin(), want.end(), v);
    expect_equal("fill", n, want, po);
  }
  {
    OffsetCalc<1> c{};
    c.ndim = 1;
    c.sizes[0] = n;
    c.strides[0][0] = 1;
    const unsigned sg = static_cast<unsigned>(std::min<std::int64_t>(std::max<std::int64_t>(1, (n + 255) / 256), 132 * 8));
    float* parts = nullptr;
    float* out = nullptr;
    CK(cudaMalloc(&parts, sg * 16));
    CK(cudaMalloc(&out, 16));
    ck_sum_partial_f32<<<sg, 256>>>(px, c, n, parts);
    ck_sum_final_f32<<<1, 256>>>(parts, static_cast<int>(sg), out);
    CK(cudaGetLastError());
    float got = 0;
    CK(cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost));
    double ref = 0, mag = 0;
    for (float v : x) { ref += v; mag += std::fabs(v); }
    if (!(std::fabs(got - ref) <= 1e-5 * mag + 1e-6)) {
      ++failures;
      std::printf("FAIL sum n=%lld: %.9g vs %.9g\n", static_cast<long long>(n), got, ref);
    }
    CK(cudaFree(parts));
    CK(cudaFree(out));
  }
  CK(cudaFree(dx));
  CK(cudaFree(dy));
  CK(cudaFree(dout));
}

template <class Launch>
double median_ms(Launch launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int r = 0; r < 23; ++r) {
    CK(cudaEventRecord(e0));
    launch(r % 4);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 3) t.push_back(ms);  // three warm-up runs
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  const std::int64_t sizes[] = {1, 3, 4, 5, 255, 1023, 1024, 1025, 4095, 4096, 4097, 4096 * 3 + 7,
                                (1 << 20) + 3, (1 << 24) + 5};
  for (std::int64_t n : sizes) check(n);
  std::printf("correctness: %zu sizes, %d failures\n", sizeof(sizes) / sizeof(sizes[0]), failures);

  const std::int64_t n = std::int64_t{1} << 28;  // 1 GiB of float32
  const std::size_t bytes = static_cast<std::size_t>(n) * 4;
  float *x[4], *y[4], *o[4];
  for (int k = 0; k < 4; ++k) {
    CK(cudaMalloc(&x[k], bytes));
    CK(cudaMalloc(&y[k], bytes));
    CK(cudaMalloc(&o[k], bytes));
    CK(cudaMemset(x[k], 0x3f, bytes));
    CK(cudaMemset(y[k], 0x40, bytes));
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned g = tiles(n, 4);
  auto tbs = [&](double ms, double moved) { return moved / (ms * 1e-3) / 1e12; };
  const double gb = static_cast<double>(bytes);
  float* parts = nullptr;
  CK(cudaMalloc(&parts, 132 * 8 * 16 * 8));
  OffsetCalc<1> c{};
  c.ndim = 1;
  c.sizes[0] = n;
  c.strides[0][0] = 1;
  const unsigned sg = static_cast<unsigned>(sms * 8);
  struct Row { const char* name; double tb; };
  std::vector<Row> rows = {
      {"copy (cudaMemcpy D2D)", tbs(median_ms([&](int k) { CK(cudaMemcpyAsync(o[k], x[k], bytes, cudaMemcpyDeviceToDevice)); }), 2 * gb)},
      {"add", tbs(median_ms([&](int k) { ck_binaryc_f32<<<g, 256>>>(binary_args(o[k], x[k], y[k], n, kAdd, kNoScalar, 0)); }), 3 * gb)},
      {"mul", tbs(median_ms([&](int k) { ck_binaryc_f32<<<g, 256>>>(binary_args(o[k], x[k], y[k], n, kMul, kNoScalar, 0)); }), 3 * gb)},
      {"add number", tbs(median_ms([&](int k) { ck_binaryc_f32<<<g, 256>>>(binary_args(o[k], x[k], nullptr, n, kAdd, kScalarOther, 1)); }), 2 * gb)},
      {"relu", tbs(median_ms([&](int k) { ck_unaryc_f32<<<g, 256>>>(o[k], x[k], n, kRelu); }), 2 * gb)},
      {"neg", tbs(median_ms([&](int k) { ck_unaryc_f32<<<g, 256>>>(o[k], x[k], n, kNeg); }), 2 * gb)},
      {"relu, previous one-wave grid-stride", tbs(median_ms([&](int k) {
         old_relu<<<sms * 4, 256>>>(reinterpret_cast<const float4*>(x[k]), reinterpret_cast<float4*>(o[k]), n / 4); }), 2 * gb)},
      {"cast f32->f16", tbs(median_ms([&](int k) { ck_castc_f16_f32<<<g, 256>>>(o[k], x[k], n); }), 1.5 * gb)},
      {"fill", tbs(median_ms([&](int k) {
         FillArgs f{};
         f.out = o[k];
         f.n = n;
         f.contiguous = 1;
         ck_fillc_4<<<g, 256>>>(f); }), gb)},
      {"sum", tbs(median_ms([&](int k) {
         ck_sum_partial_f32<<<sg, 256>>>(x[k], c, n, parts);
         ck_sum_final_f32<<<1, 256>>>(parts, static_cast<int>(sg), parts + sg * 4); }), gb)},
  };
  std::printf("1 GiB float32, TB/s (bytes read + written), median of 20:\n");
  for (const Row& r : rows) std::printf("  %-38s %.2f\n", r.name, r.tb);
  return failures ? 1 : 0;
}
