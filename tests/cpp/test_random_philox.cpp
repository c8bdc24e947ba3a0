// RNG: Philox known-answer vectors, seeding semantics, state round trip, distributions,
// graph-safe offsets (emulated capture + two replays).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
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

// ---- the float32 normal transform (philox.hpp: Box-Muller, rng::bm_pair_f32) ----
// On the host it runs on the C library's float functions; the GPU runs the same formula on
// its special-function unit. These pin the formula itself: the uniforms it derives from
// the words, its extreme words, and the distribution of what it produces.
TEST(BoxMuller, PairIsTheFormulaOnItsUniforms) {
  std::uint32_t x = 12345u;
  auto next = [&x] { x = x * 1664525u + 1013904223u; return x; };
  for (int i = 0; i < 100000; ++i) {
    const std::uint32_t xr = next(), xa = next();
    const double u = (static_cast<double>(xr) + 0.5) / 4294967296.0;  // (0, 1]: x 2^-32 + 2^-33
    const double t = static_cast<double>(xa >> 9) / 8388608.0;        // top 23 bits: [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u));
    float n0, n1;
    rng::bm_pair_f32(xr, xa, &n0, &n1);
    // float rounding of the functions (a few float ulps of r) and of u to 24 bits (up to
    // 2^-25 near 1), which sqrt magnifies as r goes to 0: dr = du / (u r).
    const double tol = std::min(1e-3, 4e-7 * r + 4e-8 / r);
    ASSERT_NEAR(n0, r * std::cos(2 * M_PI * t), tol + 1e-6) << xr << " " << xa;
    ASSERT_NEAR(n1, r * std::sin(2 * M_PI * t), tol + 1e-6) << xr << " " << xa;
  }
}

TEST(BoxMuller, ExtremeWordsGiveFiniteValues) {
  float n0, n1;
  rng::bm_pair_f32(0u, 0u, &n0, &n1);  // the smallest radius uniform, 2^-33: the largest |z|
  EXPECT_NEAR(n0, std::sqrt(-2.0 * std::log(std::ldexp(1.0, -33))), 1e-5);
  EXPECT_EQ(n1, 0.0f);
  rng::bm_pair_f32(0xffffffffu, 0xffffffffu, &n0, &n1);  // u rounds to 1: radius 0, no NaN
  EXPECT_EQ(n0, 0.0f);
  EXPECT_EQ(n1 == 0.0f, true);
  for (std::uint32_t w : {0u, 1u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu}) {
    for (std::uint32_t a : {0u, 0x3fffffffu, 0x80000000u, 0xffffffffu}) {
      rng::bm_pair_f32(w, a, &n0, &n1);
      EXPECT_TRUE(std::isfinite(n0) && std::isfinite(n1)) << w << " " << a;
      EXPECT_LE(std::fabs(n0), 6.77f);
      EXPECT_LE(std::fabs(n1), 6.77f);
    }
  }
}

TEST(BoxMuller, Normal4IsStandardNormal) {
  // 2^20 values from consecutive Philox blocks: KS against the normal CDF, the tails'
  // frequencies, and no correlation between the two values of a pair.
  const int blocks = 1 << 18;
  std::vector<double> v;
  v.reserve(static_cast<std::size_t>(blocks) * 4);
  double pair_dot = 0;
  for (int b = 0; b < blocks; ++b) {
    float out[4];
    rng::normal4_f32(rng::philox_block(2024, static_cast<std::uint64_t>(b)), 0.0f, 1.0f, out);
    pair_dot += static_cast<double>(out[0]) * out[1] + static_cast<double>(out[2]) * out[3];
    for (float f : out) v.push_back(f);
  }
  const double n = static_cast<double>(v.size());
  std::size_t beyond3 = 0, beyond4 = 0;
  for (double z : v) {
    beyond3 += std::fabs(z) > 3.0;
    beyond4 += std::fabs(z) > 4.0;
  }
  // P(|z| > 3) = 0.0026998, P(|z| > 4) = 6.334e-5; five standard deviations of the counts.
  EXPECT_NEAR(beyond3, n * 0.0026998, 5 * std::sqrt(n * 0.0026998));
  EXPECT_NEAR(beyond4, n * 6.334e-5, 5 * std::sqrt(n * 6.334e-5) + 1);
  EXPECT_NEAR(pair_dot / (n / 2), 0.0, 5 / std::sqrt(n / 2));
  std::sort(v.begin(), v.end());
  double d = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double f = 0.5 * std::erfc(-v[i] / std::sqrt(2.0));
    d = std::max({d, std::fabs(f - i / n), std::fabs(f - (i + 1) / n)});
  }
  EXPECT_LT(d, 1.95 / std::sqrt(n));  // alpha = 0.001
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

// Same seed/offset on a host generator and the device generator. Bit-identical, except
// normal_/randn of float32/16/bf16: the GPU computes Box-Muller with its fast special
// functions (philox.hpp), so there the values agree to float rounding (float32: ~1e-6 of
// the value, up to ~3e-4 absolute near 0 where the square root magnifies the rounding of
// u close to 1; float16/bfloat16: one unit in the last place after rounding). The emulated
// backend runs the host formula for both generators, identical bits.
void expect_same_samples(const std::vector<double>& h, const std::vector<double>& d, DType t, bool normal,
                         const std::string& what) {
  ASSERT_EQ(h.size(), d.size()) << what;
  if (!normal || t == DType::float64) {
    EXPECT_EQ(h, d) << what;
    return;
  }
  const double rtol = t == DType::float16 ? 1.0 / 512 : t == DType::bfloat16 ? 1.0 / 64 : 1e-5;
  for (std::size_t i = 0; i < h.size(); ++i)
    ASSERT_NEAR(h[i], d[i], 1e-3 + rtol * std::fabs(h[i])) << what << " element " << i;
}

TEST(RandomSampling, HostAndDeviceAgreeForSameState) {
  if (!have_device()) GTEST_SKIP() << "no device";
  for (DType t : {DType::float32, DType::float64, DType::float16, DType::bfloat16}) {
    Generator hg(Device::cpu(), 99);
    Generator& dg = default_generator(0);
    dg.manual_seed(99);
    Tensor h = randn({1001}, TensorOptions{t}, &hg);
    Tensor d = randn({1001}, TensorOptions{t, Device::cuda(0)}, &dg);
    expect_same_samples(to_vec(h), to_vec(d), t, true, dtype_name(t));
    EXPECT_EQ(hg.offset(), dg.offset());
    Tensor hu = rand({1001}, TensorOptions{t}, &hg);
    Tensor du = rand({1001}, TensorOptions{t, Device::cuda(0)}, &dg);
    expect_same_samples(to_vec(hu), to_vec(du), t, false, dtype_name(t));
  }
  // The float32 fast kernels (ck_uniform_f32 / ck_normal_f32) with their grid-stride pairs
  // of blocks, the odd last block and the n % 4 tail, at sizes from one element to many
  // grid-stride iterations, with a nonzero starting offset; normal_ both as randn and with
  // a mean and std.
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
      expect_same_samples(to_vec(h), to_vec(d), DType::float32, c.dist == 1,
                          "dist " + std::to_string(c.dist) + " n " + std::to_string(n));
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
