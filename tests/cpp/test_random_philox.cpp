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

// The float32 normal path's polynomials (-2 ln u on 24-bit integers, sincos of 32-bit
// turns) against double references, over every exponent and a dense sweep.
TEST(Philox, FastBoxMullerAccuracy) {
  for (std::uint32_t k : {1u, 2u, 3u, 1000u, 11863283u, 11863284u, 8388608u, 16777215u, 16777216u}) {
    double ref = -2.0 * std::log(k / 16777216.0);
    EXPECT_NEAR(rng::minus2_log_u24(k), ref, 4e-7 * ref + 1e-30) << k;
  }
  EXPECT_EQ(rng::minus2_log_u24(16777216u), 0.0f);
  for (std::uint32_t k = 1; k <= (1u << 24); k += 4099) {
    double ref = -2.0 * std::log(k / 16777216.0);
    ASSERT_NEAR(rng::minus2_log_u24(k), ref, 4e-7 * ref + 1e-30) << k;
  }
  for (std::uint64_t x = 0; x < (1ull << 32); x += 65537) {
    float s, c;
    rng::sincos_u32(static_cast<std::uint32_t>(x), &s, &c);
    double ang = 2 * M_PI * (static_cast<std::uint32_t>(x) >> 7) / 33554432.0;  // top 25 bits
    ASSERT_NEAR(s, std::sin(ang), 2e-7) << x;
    ASSERT_NEAR(c, std::cos(ang), 2e-7) << x;
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
  // The float32 fast kernels (ck_uniform_f32 / ck_normal_f32) plus their n % 4 tail, at a
  // size that spans several grid-stride iterations, and a nonzero starting offset.
  for (int dist = 0; dist < 2; ++dist) {
    Generator hg(Device::cpu(), 1234);
    Generator& dg = default_generator(0);
    dg.manual_seed(1234);
    hg.set_offset(40);
    dg.set_offset(40);
    const std::int64_t n = 3 * 1000 * 1000 + 3;
    Tensor h = empty({n}, TensorOptions{DType::float32});
    Tensor d = empty({n}, TensorOptions{DType::float32, Device::cuda(0)});
    if (dist == 0) { h.uniform_(-2.0, 3.0, &hg); d.uniform_(-2.0, 3.0, &dg); }
    else { h.normal_(1.0, 0.5, &hg); d.normal_(1.0, 0.5, &dg); }
    Tensor dh = d.to(Device::cpu()).contiguous();
    EXPECT_EQ(0, std::memcmp(h.data_ptr(), dh.data_ptr(), static_cast<std::size_t>(n) * 4)) << "dist " << dist;
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
