// RNG: Philox known-answer vectors, seeding semantics, state round trip, distributions,
// graph-safe offsets (emulated capture + two replays).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"
#include "cudakit/random.hpp"
#include "cudakit/stream.hpp"
#include "kernels/philox.hpp"

using namespace cudakit;

namespace {
bool have_device() { return detail::backend().device_count() > 0; }
std::vector<double> to_vec(const Tensor& t) {
  Tensor h = t.to(Device::cpu(), DType::float64).contiguous();
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}
}  // namespace

// Known-answer tests of Random123's Philox4x32-10 (kat_vectors).
TEST(Philox, KnownAnswers) {
  auto r = rng::philox4x32_10(rng::Philox4{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  r = rng::philox4x32_10(rng::Philox4{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(r.v[0], 0x408f276du);
  EXPECT_EQ(r.v[1], 0x41c83b0eu);
  EXPECT_EQ(r.v[2], 0xa20bc7c6u);
  EXPECT_EQ(r.v[3], 0x6d5451fdu);
  r = rng::philox4x32_10(rng::Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(r.v[0], 0xd16cfe09u);
  EXPECT_EQ(r.v[1], 0x94fdccebu);
  EXPECT_EQ(r.v[2], 0x5001e420u);
  EXPECT_EQ(r.v[3], 0x24126ea1u);
}

TEST(Philox, PortableMathAccuracy) {
  for (double u : {1e-7, 0.001, 0.25, 0.5, 0.7071, 0.9, 0.999999, 1.0}) {
    EXPECT_NEAR(rng::portable_log(static_cast<float>(u)), std::log(static_cast<float>(u)), 2e-6 * (1 + std::fabs(std::log(u))));
    EXPECT_NEAR(rng::portable_log(u), std::log(u), 1e-15 * (1 + std::fabs(std::log(u))));
  }
  for (int i = 0; i < 1000; ++i) {
    double u = i / 1000.0;
    float s, c;
    rng::sincos_turns(static_cast<float>(u), &s, &c);
    EXPECT_NEAR(s, std::sin(2 * M_PI * u), 3e-7);
    EXPECT_NEAR(c, std::cos(2 * M_PI * u), 3e-7);
    double sd, cd;
    rng::sincos_turns(u, &sd, &cd);
    EXPECT_NEAR(sd, std::sin(2 * M_PI * u), 1e-15);
    EXPECT_NEAR(cd, std::cos(2 * M_PI * u), 1e-15);
  }
}

// ---- the float32 normal ziggurat (philox.hpp, tables from scripts/gen_ziggurat.py) ----
namespace {
constexpr double kTwo31 = 2147483648.0;
double layer_edge(int i) { return i >= 256 ? 0.0 : static_cast<double>(rng::kZigTable[i].w) * kTwo31; }  // X[i]
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
}  // namespace

// The committed tables satisfy the ziggurat's construction: equal layer areas, densities at
// the edges, fast-accept bounds never above the next edge, and the base layer's width.
TEST(Ziggurat, TableInvariants) {
  const double r = layer_edge(1);
  const double v = r * std::exp(-0.5 * r * r) + std::sqrt(M_PI / 2) * std::erfc(r / std::sqrt(2.0));
  EXPECT_NEAR(r, 3.6541528853610088, 1e-6);
  EXPECT_NEAR(layer_edge(0), v / std::exp(-0.5 * r * r), 1e-5);
  EXPECT_EQ(rng::kZigTable[0].t, CK_ZIGGURAT_R);
  EXPECT_EQ(rng::kZigTable[255].t, 0.0f);  // the top layer has no rectangle part
  EXPECT_EQ(rng::kZigDensity[256], 1.0f);
  for (int i = 1; i < 256; ++i) {
    const double xi = layer_edge(i), xn = layer_edge(i + 1);
    ASSERT_LT(xn, xi) << i;
    ASSERT_LE(static_cast<double>(rng::kZigTable[i].t), xn) << i;  // rounded down
    ASSERT_NEAR(rng::kZigTable[i].t, xn, 5e-7 * xn + 1e-30) << i;
    ASSERT_NEAR(rng::kZigDensity[i], std::exp(-0.5 * xi * xi), 1e-7) << i;
    const double area = xi * (static_cast<double>(rng::kZigDensity[i + 1]) - rng::kZigDensity[i]);
    ASSERT_NEAR(area / v, 1.0, 2e-4) << i;  // float tables: the difference of two densities
  }
  EXPECT_NEAR(CK_ZIGGURAT_INV_R * CK_ZIGGURAT_R, 1.0f, 1e-7);
}

TEST(Ziggurat, ExpAccuracy) {
  for (double a = -6.9; a <= 0.0; a += 1.0 / 4096) {
    const float got = rng::zig_exp(static_cast<float>(a));
    const double ref = std::exp(static_cast<double>(static_cast<float>(a)));
    ASSERT_NEAR(got, ref, 2.5e-7 * ref) << a;
  }
}

// The randn specialisation of ck_normal_f32 skips the fma: fma(v, 1, 0) must equal v for
// every candidate (in particular no candidate is -0, which the fma would turn into +0).
TEST(Ziggurat, CandidatesAreNeverNegativeZero) {
  for (std::uint32_t i = 0; i < 256; ++i)
    for (std::uint32_t j : {0u, 1u, 0x7fffffu, 0x800000u, 0xffffffu}) {
      const float v = rng::zig_candidate((j << 8) | i, rng::kZigTable[i].w);
      ASSERT_EQ(ops::f32_bits(rng::fma32(v, 1.0f, 0.0f)), ops::f32_bits(v)) << i << " " << j;
    }
}

namespace {
// n standard normals from the CPU executor (the emulated backend's path, and the bits the
// GPU kernels must reproduce).
std::vector<float> cpu_normals(std::int64_t n, std::uint64_t seed, double mean = 0.0, double sd = 1.0) {
  std::vector<float> out(static_cast<std::size_t>(n));
  rng::SampleArgs a{};
  a.out = out.data();
  a.n = n;
  a.dtype = ops::kFloat32;
  a.dist = rng::kNormal;
  a.a = mean;
  a.b = sd;
  a.philox = rng::PhiloxArgs{seed, 0, nullptr};
  a.keys = rng::philox_keys(seed);
  for (std::int64_t b = 0; b < (n + 3) / 4; ++b) rng::sample_block(a, 0, b);
  return out;
}
}  // namespace

// Distribution check with bins at the layer edges X[i], where the wedges (the slow path)
// carry a large share of each bin's mass: a wrong wedge or tail test shows up as a bin off
// by many standard deviations. 2^24 samples; also the moments and the tail frequency.
TEST(Ziggurat, DistributionByLayerEdges) {
  const std::int64_t n = 1 << 24;
  auto z = cpu_normals(n, 20251130);
  std::vector<double> edges;  // increasing: -X[1] .. -X[255], 0, X[255] .. X[1]
  for (int i = 1; i < 256; ++i) edges.push_back(-layer_edge(i));
  edges.push_back(0.0);
  for (int i = 255; i >= 1; --i) edges.push_back(layer_edge(i));
  std::vector<std::int64_t> counts(edges.size() + 1, 0);
  double m1 = 0, m2 = 0, m3 = 0, m4 = 0;
  std::int64_t tail = 0;
  for (float f : z) {
    const double x = f;
    counts[static_cast<std::size_t>(std::upper_bound(edges.begin(), edges.end(), x) - edges.begin())]++;
    m1 += x; m2 += x * x; m3 += x * x * x; m4 += x * x * x * x;
    tail += std::fabs(x) > layer_edge(1);
  }
  double chi2 = 0, worst = 0;
  for (std::size_t b = 0; b < counts.size(); ++b) {
    const double lo = b == 0 ? -INFINITY : edges[b - 1], hi = b == edges.size() ? INFINITY : edges[b];
    const double expect = n * (normal_cdf(hi) - normal_cdf(lo));
    const double d = (counts[b] - expect) / std::sqrt(expect);
    chi2 += d * d;
    worst = std::max(worst, std::fabs(d));
  }
  const double dof = static_cast<double>(counts.size() - 1);
  EXPECT_LT(chi2, dof + 5 * std::sqrt(2 * dof)) << "worst bin " << worst << " sigma";
  EXPECT_LT(worst, 5.0);
  EXPECT_NEAR(m1 / n, 0.0, 5 * std::sqrt(1.0 / n));
  EXPECT_NEAR(m2 / n, 1.0, 5 * std::sqrt(2.0 / n));
  EXPECT_NEAR(m3 / n, 0.0, 5 * std::sqrt(15.0 / n));
  EXPECT_NEAR(m4 / n, 3.0, 5 * std::sqrt(96.0 / n));
  const double p_tail = 2 * normal_cdf(-layer_edge(1));
  EXPECT_NEAR(static_cast<double>(tail), n * p_tail, 5 * std::sqrt(n * p_tail));
}

// The tail path alone: words of the base layer beyond R must give the normal tail,
// P(X > R + t | X > R), checked by Kolmogorov-Smirnov on 200k slow-path samples.
TEST(Ziggurat, TailPathMatchesNormalTail) {
  const double r = CK_ZIGGURAT_R;
  std::vector<double> t;
  std::uint64_t block = 0;
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  while (t.size() < 200000) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;  // any word of the base layer
    const std::uint32_t x = static_cast<std::uint32_t>(h >> 32) & 0xffffff00u;
    const float v = rng::zig_candidate(x, rng::kZigTable[0].w);
    if (std::fabs(v) < rng::kZigTable[0].t) continue;
    const float z = rng::zig_slow(x, 77, block++, 0);
    if (std::fabs(z) >= r) t.push_back(std::fabs(z));  // a retry may land elsewhere
  }
  std::sort(t.begin(), t.end());
  const double tail = normal_cdf(-r);
  double d = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const double f = 1 - normal_cdf(-t[i]) / tail;  // conditional CDF beyond R
    d = std::max({d, std::fabs(f - double(i) / t.size()), std::fabs(f - double(i + 1) / t.size())});
  }
  EXPECT_LT(d, 1.95 / std::sqrt(static_cast<double>(t.size())));
}

// Same (seed, stream position) -> same value, whichever block of the call is asked first:
// the slow path depends on the word and its position only (the GPU kernel relies on this
// when it finishes rejected elements out of order).
TEST(Ziggurat, SlowPathIsAFunctionOfPosition) {
  auto a = cpu_normals(4096 + 3, 5);
  std::vector<float> b(a.size());
  rng::SampleArgs args{};
  args.out = b.data();
  args.n = static_cast<std::int64_t>(b.size());
  args.dtype = ops::kFloat32;
  args.dist = rng::kNormal;
  args.a = 0.0;
  args.b = 1.0;
  args.philox = rng::PhiloxArgs{5, 0, nullptr};
  for (std::int64_t blk = (args.n + 3) / 4 - 1; blk >= 0; --blk) rng::sample_block(args, 0, blk);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  // mean + std * z with one fma, for every element.
  auto c = cpu_normals(4096 + 3, 5, -1.5, 0.25);
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(c[i], rng::fma32(a[i], 0.25f, -1.5f)) << i;
}

// The GPU normal kernel runs the slow path from shared-memory copies of the tables and
// draws its side stream with the precomputed round keys (rng::zig_slow_from with its own
// source): both must give zig_slow's values. Words of every layer, rejected by the fast
// test (wedges and the base layer's tail), at block indices beyond 2^32.
struct CopiedSource {
  rng::ZigEntry table[256];
  float density[257];
  rng::PhiloxKeys keys;
  rng::ZigEntry entry(std::uint32_t i) const { return table[i]; }
  float density_at(std::uint32_t i) const { return density[i]; }
  rng::Philox4 side(std::uint64_t block, std::uint32_t c2) const {
    return rng::philox4x32_10(rng::side_counter(block, c2), keys);
  }
};
struct CopiedSourceView {
  const CopiedSource& s;
  rng::ZigEntry entry(std::uint32_t i) const { return s.entry(i); }
  float density(std::uint32_t i) const { return s.density_at(i); }
  rng::Philox4 side(std::uint64_t block, std::uint32_t c2) const { return s.side(block, c2); }
};
TEST(Ziggurat, SlowPathWithRoundKeysAndCopiedTables) {
  for (std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{77}, std::uint64_t{0xfedcba9876543210ull}}) {
    CopiedSource src{};
    for (std::uint32_t i = 0; i < 256; ++i) src.table[i] = rng::zig_entry(i);
    for (std::uint32_t i = 0; i < 257; ++i) src.density[i] = rng::zig_density(i);
    src.keys = rng::philox_keys(seed);
    for (std::uint64_t b = 0; b < 64; ++b) {  // the side stream itself
      const rng::Philox4 p = rng::philox_side(seed, b * 0x100000001ull, static_cast<std::uint32_t>(b * 7 + 1));
      const rng::Philox4 q = src.side(b * 0x100000001ull, static_cast<std::uint32_t>(b * 7 + 1));
      ASSERT_EQ(0, std::memcmp(&p, &q, sizeof p)) << b;
    }
    std::uint64_t h = seed ^ 0x9e3779b97f4a7c15ull;
    int tails = 0, checked = 0;
    while (checked < 20000) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      const std::uint32_t x = static_cast<std::uint32_t>(h >> 32);
      const rng::ZigEntry e = rng::zig_entry(x & 0xffu);
      if (std::fabs(rng::zig_candidate(x, e.w)) < e.t) continue;
      const std::uint64_t block = (h & 0xffffffffffull) + (std::uint64_t{1} << 32);
      const int k = static_cast<int>(h >> 5) & 3;
      const float a = rng::zig_slow(x, seed, block, k);
      const float b = rng::zig_slow_from(CopiedSourceView{src}, x, block, k);
      ASSERT_EQ(0, std::memcmp(&a, &b, 4)) << x << " " << block << " " << k;
      tails += (x & 0xffu) == 0;
      ++checked;
    }
    EXPECT_GT(tails, 100);  // the base layer's tail branch was exercised too
  }
}

TEST(RandomSeeding, TorchSemantics) {
  if (!have_device()) GTEST_SKIP() << "no device";
  EXPECT_EQ(initial_seed(), kDefaultRngSeed);  // lazy default before any seeding
  manual_seed(123);
  EXPECT_EQ(initial_seed(), 123u);
  Tensor st = get_rng_state();
  EXPECT_EQ(st.dtype(), DType::uint8);
  EXPECT_EQ(st.numel(), 16);
  EXPECT_FALSE(st.is_cuda());
  Tensor a = rand({1000}, device_options());
  Tensor b = rand({1000}, device_options());
  EXPECT_NE(to_vec(a), to_vec(b));
  set_rng_state(st);
  EXPECT_EQ(to_vec(rand({1000}, device_options())), to_vec(a));  // state restore replays
  manual_seed(123);
  EXPECT_EQ(to_vec(rand({1000}, device_options())), to_vec(a));
  std::uint64_t s1 = seed();
  std::uint64_t s2 = seed();
  EXPECT_NE(s1, s2);
  EXPECT_EQ(initial_seed(), s2);
  manual_seed_all(7);
  for (auto& s : get_rng_state_all()) EXPECT_EQ(s.data<std::uint64_t>()[0], 7u);
  seed_all();
  auto all = get_rng_state_all();
  for (auto& s : all) EXPECT_EQ(s.data<std::uint64_t>()[0], all[0].data<std::uint64_t>()[0]);
  set_rng_state_all(all);
  EXPECT_THROW(set_rng_state(zeros({8}, TensorOptions{DType::uint8})), ValueError);
  EXPECT_THROW(set_rng_state_all({}), ValueError);
}

TEST(RandomSampling, HostAndDeviceBitIdenticalForSameState) {
  if (!have_device()) GTEST_SKIP() << "no device";
  // Same seed/offset on a host generator and the device generator: identical bits.
  for (DType t : {DType::float32, DType::float64, DType::float16, DType::bfloat16}) {
    Generator hg(Device::cpu(), 99);
    Generator& dg = default_generator(0);
    dg.manual_seed(99);
    Tensor h = randn({1001}, TensorOptions{t}, &hg);
    Tensor d = randn({1001}, TensorOptions{t, Device::cuda(0)}, &dg);
    EXPECT_EQ(to_vec(h), to_vec(d)) << dtype_name(t);
    EXPECT_EQ(hg.offset(), dg.offset());
  }
  // The float32 fast kernels (ck_uniform_f32 / ck_normal_f32) plus their partial chunk and
  // n % 4 tail, at sizes from below one 64-block chunk to many grid-stride iterations (the
  // normal kernel's deferred slow path drains its queues mid-loop and at the end), with a
  // nonzero starting offset; normal_ both as randn (mean 0, std 1: the kernel's no-fma
  // branch) and with a mean and std.
  struct Case { int dist; double p0, p1; };
  for (const Case c : {Case{0, -2.0, 3.0}, Case{1, 1.0, 0.5}, Case{1, 0.0, 1.0}}) {
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{255}, std::int64_t{256 * 3 + 2}, std::int64_t{65537},
                           std::int64_t{3 * 1000 * 1000 + 3}, std::int64_t{(1 << 24) + 1}}) {
      Generator hg(Device::cpu(), 1234);
      Generator& dg = default_generator(0);
      dg.manual_seed(1234);
      hg.set_offset(40);
      dg.set_offset(40);
      Tensor h = empty({n}, TensorOptions{DType::float32});
      Tensor d = empty({n}, TensorOptions{DType::float32, Device::cuda(0)});
      if (c.dist == 0) { h.uniform_(c.p0, c.p1, &hg); d.uniform_(c.p0, c.p1, &dg); }
      else { h.normal_(c.p0, c.p1, &hg); d.normal_(c.p0, c.p1, &dg); }
      Tensor dh = d.to(Device::cpu()).contiguous();
      EXPECT_EQ(0, std::memcmp(h.data_ptr(), dh.data_ptr(), static_cast<std::size_t>(n) * 4))
          << "dist " << c.dist << " (" << c.p0 << ", " << c.p1 << ") n " << n;
      EXPECT_EQ(hg.offset(), dg.offset());
    }
  }
}

TEST(RandomSampling, Distributions) {
  if (!have_device()) GTEST_SKIP() << "no device";
  manual_seed(2024);
  const int n = 1000000;
  auto moments = [](const std::vector<double>& v) {
    double m = 0, s = 0;
    for (double x : v) m += x;
    m /= v.size();
    for (double x : v) s += (x - m) * (x - m);
    return std::pair<double, double>(m, s / v.size());
  };
  // Kolmogorov-Smirnov statistic against a CDF.
  auto ks = [](std::vector<double> v, auto cdf) {
    std::sort(v.begin(), v.end());
    double d = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      double f = cdf(v[i]);
      d = std::max({d, std::fabs(f - double(i) / v.size()), std::fabs(f - double(i + 1) / v.size())});
    }
    return d;
  };
  const double ks_crit = 1.95 / std::sqrt(double(n));  // alpha = 0.001
  for (DType t : {DType::float32, DType::float64}) {
    auto u = to_vec(rand({n}, device_options(t)));
    auto [mu, vu] = moments(u);
    EXPECT_NEAR(mu, 0.5, 0.002);
    EXPECT_NEAR(vu, 1.0 / 12, 0.001);
    EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0);
    EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0);
    EXPECT_LT(ks(u, [](double x) { return x; }), ks_crit);
    Tensor nt = empty({n}, device_options(t));
    nt.normal_(3.0, 2.0);
    auto g = to_vec(nt);
    auto [mg, vg] = moments(g);
    EXPECT_NEAR(mg, 3.0, 0.01);
    EXPECT_NEAR(vg, 4.0, 0.03);
    EXPECT_LT(ks(g, [](double x) { return 0.5 * std::erfc(-(x - 3.0) / (2.0 * std::sqrt(2.0))); }), ks_crit);
  }
  auto r = to_vec(randint(-3, 5, {n}, device_options(DType::int64)));
  std::vector<int> counts(8, 0);
  for (double x : r) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 5);
    counts[static_cast<int>(x) + 3]++;
  }
  for (int c : counts) EXPECT_NEAR(c, n / 8.0, 5 * std::sqrt(n / 8.0));
  EXPECT_THROW(randint(5, 5, {3}, device_options(DType::int64)), ValueError);
  EXPECT_THROW(rand({3}, device_options(DType::int32)), ValueError);
}

// A captured graph replayed twice must draw different numbers: the offset is read from
// device memory at run time and advanced by replay_prologue().
TEST(RandomGraphs, ReplaysDrawFreshNumbers) {
  if (!have_device()) GTEST_SKIP() << "no device";
  Stream s(0);
  Generator& g = default_generator(0);
  g.manual_seed(5);
  Tensor out = empty({64}, device_options());
  g.capture_prologue();
  auto& be = detail::backend();
  {
    StreamGuard guard(s);
    be.stream_begin_capture(s.handle(), detail::CaptureMode::thread_local_);
    out.uniform_();
  }
  detail::GraphHandle graph = be.stream_end_capture(s.handle());
  std::uint64_t blocks = g.capture_epilogue();
  EXPECT_EQ(blocks, 16u);
  detail::GraphExecHandle exec = be.graph_instantiate(graph);
  std::vector<std::vector<double>> draws;
  for (int rep = 0; rep < 2; ++rep) {
    g.replay_prologue(blocks, s);
    be.graph_launch(exec, s.handle());
    s.sync();
    draws.push_back(to_vec(out));
  }
  EXPECT_NE(draws[0], draws[1]);
  // The replays consumed exactly the blocks an eager call would: same numbers eagerly.
  g.manual_seed(5);
  Tensor e0 = rand({64}, device_options());
  Tensor e1 = rand({64}, device_options());
  EXPECT_EQ(to_vec(e0), draws[0]);
  EXPECT_EQ(to_vec(e1), draws[1]);
  be.graph_exec_destroy(exec);
  be.graph_destroy(graph);
}
