// Strided batched GEMM (tunable::gemm_strided_batched, GemmArgs::batch) through the whole
// stack, on the backend in use (emulated in CI: CBLAS and CPU-loop candidates; cuda on the GPU
// host: cublasGemmStridedBatchedEx and cuBLASLt plans): products against a reference loop for
// every dtype and transpose, stride-0 broadcasts, alpha / beta; TunableOp tuning a batch under
// torch's GemmStridedBatchedTunableOp signatures, results files both ways, offline tuning of
// batched lines, and the argument checks. test_tunable.cpp holds the plain-GEMM suite.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tunable.hpp"
#include "kernels/numeric.hpp"
#include "tunable/candidates.hpp"
#include "tunable/dispatch.hpp"
#include "tunable/results.hpp"
#include "tunable/results_file.hpp"
#include "tunable/settings.hpp"
#include "tunable/signature.hpp"
#include "tunable/tuner.hpp"
#include "tunable_test_util.hpp"

namespace fs = std::filesystem;
using namespace cudakit;
namespace td = cudakit::tunable::detail;

namespace {

using tunable_test::slurp;
using tunable_test::spit;

bool have_device() { return detail::backend().device_count() > 0; }
#define REQUIRE_DEVICE()                                             \
  do {                                                               \
    if (!have_device()) GTEST_SKIP() << "no device on this backend"; \
  } while (0)

std::size_t elem_size(DType t) { return t == DType::float64 ? 8 : t == DType::float32 ? 4 : 2; }

// Host values <-> device bytes of `t`; from_bytes(to_bytes(x)) is x rounded to `t`.
std::vector<unsigned char> to_bytes(const std::vector<double>& v, DType t) {
  std::vector<unsigned char> out(v.size() * elem_size(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    unsigned char* p = out.data() + i * elem_size(t);
    if (t == DType::float64) {
      std::memcpy(p, &v[i], 8);
    } else if (t == DType::float32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(p, &f, 4);
    } else if (t == DType::float16) {
      const ops::Half h = ops::Half::from_float(static_cast<float>(v[i]));
      std::memcpy(p, &h, 2);
    } else {
      const ops::BFloat16 h = ops::BFloat16::from_float(static_cast<float>(v[i]));
      std::memcpy(p, &h, 2);
    }
  }
  return out;
}
std::vector<double> from_bytes(const std::vector<unsigned char>& b, DType t) {
  std::vector<double> out(b.size() / elem_size(t));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const unsigned char* p = b.data() + i * elem_size(t);
    if (t == DType::float64) {
      std::memcpy(&out[i], p, 8);
    } else if (t == DType::float32) {
      float f;
      std::memcpy(&f, p, 4);
      out[i] = f;
    } else if (t == DType::float16) {
      ops::Half h;
      std::memcpy(&h, p, 2);
      out[i] = h.to_float();
    } else {
      ops::BFloat16 h;
      std::memcpy(&h, p, 2);
      out[i] = h.to_float();
    }
  }
  return out;
}

// Relative tolerance of a product in `t` (float16 / bfloat16 accumulate in float32 and round
// once: a few units of their last place).
double tolerance(DType t) {
  return t == DType::float64 ? 1e-12 : t == DType::float32 ? 1e-5 : t == DType::float16 ? 4e-3 : 2e-2;
}

// A strided batch in BLAS terms (column-major; op(A_i) m x k, op(B_i) k x n), with padded
// leading dimensions and a gap between consecutive C matrices whose contents must survive.
// A stride of -1 means packed (leading dimension x stored columns), plus the C gap for C.
struct Batch {
  DType t;
  bool ta, tb;
  int m, n, k, count;
  std::int64_t lda, ldb, ldc, sa, sb, sc;
  std::vector<double> a, b, c0;  // values as stored (rounded to t)
  Allocation da, db, dc;
  StreamRef stream = current_stream();
  static constexpr std::int64_t kGap = 3;
  static constexpr double kSentinel = 7.0;

  Batch(DType t_, bool ta_, bool tb_, int m_, int n_, int k_, int count_, std::int64_t sa_ = -1,
        std::int64_t sb_ = -1, unsigned seed = 1)
      : t(t_), ta(ta_), tb(tb_), m(m_), n(n_), k(k_), count(count_) {
    lda = (ta ? k : m) + 1;
    ldb = (tb ? n : k) + 2;
    ldc = m + 1;
    sa = sa_ >= 0 ? sa_ : lda * (ta ? m : k);
    sb = sb_ >= 0 ? sb_ : ldb * (tb ? k : n);
    sc = ldc * n + kGap;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    auto fill = [&](std::vector<double>& v, std::size_t size) {
      v.resize(size);
      for (double& x : v) x = u(rng);
      v = from_bytes(to_bytes(v, t), t);  // what the device holds
    };
    fill(a, span(sa, lda * ((ta ? m : k) - 1) + (ta ? k : m)));
    fill(b, span(sb, ldb * ((tb ? k : n) - 1) + (tb ? n : k)));
    fill(c0, span(sc, ldc * (n - 1) + m));
    for (int q = 0; q + 1 < count; ++q)  // the gaps after each C matrix hold a sentinel
      for (std::int64_t g = 0; g < kGap; ++g) c0[std::size_t(q * sc + ldc * n + g)] = kSentinel;
    da = upload(a);
    db = upload(b);
    dc = upload(c0);
  }
  std::size_t span(std::int64_t stride, std::int64_t one) const {
    return static_cast<std::size_t>(std::int64_t(count - 1) * stride + one);
  }
  Allocation upload(const std::vector<double>& v) {
    const std::vector<unsigned char> bytes = to_bytes(v, t);
    Allocation d = allocate_device(std::max<std::size_t>(bytes.size(), 1));
    detail::backend().memcpy_async(d.get(), bytes.data(), bytes.size(), stream.handle());
    stream.sync();
    return d;
  }
  std::vector<double> result() {
    std::vector<unsigned char> bytes(c0.size() * elem_size(t));
    detail::backend().memcpy_async(bytes.data(), dc.get(), bytes.size(), stream.handle());
    stream.sync();
    return from_bytes(bytes, t);
  }
  void reset_c() {
    const std::vector<unsigned char> bytes = to_bytes(c0, t);
    detail::backend().memcpy_async(dc.get(), bytes.data(), bytes.size(), stream.handle());
    stream.sync();
  }
  void run(double alpha = 1, double beta = 0) {
    tunable::gemm_strided_batched(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, da.get(), lda, sa,
                                  db.get(), ldb, sb, beta, dc.get(), ldc, sc, count, t, stream);
  }
  double op_a(int q, int i, int p) const {
    return a[std::size_t(q * sa + (ta ? p + std::int64_t(i) * lda : i + std::int64_t(p) * lda))];
  }
  double op_b(int q, int p, int j) const {
    return b[std::size_t(q * sb + (tb ? j + std::int64_t(p) * ldb : p + std::int64_t(j) * ldb))];
  }
  // Largest error of every product against alpha op(A_i) op(B_i) + beta C0_i, relative to the
  // largest |expected|; a gap that lost its sentinel counts as an infinite error.
  double error(const std::vector<double>& got, double alpha = 1, double beta = 0) const {
    double worst = 0, scale = 1e-30;
    for (int q = 0; q < count; ++q) {
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          double s = 0;
          for (int p = 0; p < k; ++p) s += op_a(q, i, p) * op_b(q, p, j);
          const std::size_t at = std::size_t(q * sc + j * ldc + i);
          const double want = alpha * s + beta * c0[at];
          worst = std::max(worst, std::fabs(want - got[at]));
          scale = std::max(scale, std::fabs(want));
        }
      for (std::int64_t g = 0; q + 1 < count && g < kGap; ++g)
        if (got[std::size_t(q * sc + ldc * n + g)] != kSentinel) return INFINITY;
    }
    return worst / scale;
  }
  // torch's params signature of this batch.
  std::string params() const {
    std::string s;
    s += ta ? 't' : 'n';
    s += tb ? 't' : 'n';
    for (std::int64_t v : {std::int64_t(m), std::int64_t(n), std::int64_t(k)}) s += "_" + std::to_string(v);
    s += "_B_" + std::to_string(count) + "_ld_" + std::to_string(lda) + "_" + std::to_string(ldb) +
         "_" + std::to_string(ldc);
    return s;
  }
};

class TunableBatched : public tunable_test::TunableFixture {};

// A correct candidate (the backend's own GEMM) that records the batch and strides it was given.
struct Spy {
  std::atomic<int> runs{0};
  std::mutex mu;
  std::vector<detail::GemmArgs> seen;
  void install(const std::string& name) {
    td::register_extra_candidate(td::ExtraCandidate{
        name, nullptr, [this](int device, detail::StreamHandle s, const detail::GemmArgs& g) {
          ++runs;
          {
            std::lock_guard<std::mutex> l(mu);
            detail::GemmArgs shape = g;
            shape.keep_alive.reset();
            seen.push_back(shape);
          }
          detail::backend().gemm(device, s, g);
        }});
  }
};

// ---- products ----

TEST_F(TunableBatched, EveryDtypeAndTransposeMatchesAReferenceLoop) {
  REQUIRE_DEVICE();
  for (DType t : {DType::float16, DType::bfloat16, DType::float32, DType::float64}) {
    for (int layout = 0; layout < 4; ++layout) {
      Batch p(t, layout & 1, layout & 2, 7, 5, 9, 4, -1, -1, 10 + layout);
      p.run(1.5, 0.5);
      EXPECT_LT(p.error(p.result(), 1.5, 0.5), tolerance(t))
          << dtype_name(t) << " layout " << p.params();
      p.reset_c();
      p.run();  // beta = 0 never reads C: the reference ignores C0
      EXPECT_LT(p.error(p.result()), tolerance(t)) << dtype_name(t) << " " << p.params();
    }
  }
}

TEST_F(TunableBatched, StrideZeroUsesOneMatrixForEveryProduct) {
  REQUIRE_DEVICE();
  // A shared weight against a batch of inputs, and the other way round.
  Batch shared_a(DType::float32, false, true, 6, 4, 8, 5, /*sa=*/0);
  shared_a.run(1.0, 0.25);
  EXPECT_LT(shared_a.error(shared_a.result(), 1.0, 0.25), 1e-5);
  Batch shared_b(DType::bfloat16, true, false, 3, 6, 10, 3, -1, /*sb=*/0);
  shared_b.run(-2.0, 0.0);
  EXPECT_LT(shared_b.error(shared_b.result(), -2.0, 0.0), tolerance(DType::bfloat16));
  // Both broadcast: every product is the same matrix.
  Batch both(DType::float64, false, false, 4, 4, 4, 3, 0, 0);
  both.run();
  const std::vector<double> c = both.result();
  EXPECT_LT(both.error(c), 1e-12);
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i) {
      const std::size_t at = std::size_t(j * both.ldc + i);
      EXPECT_EQ(c[at], c[at + std::size_t(both.sc)]);
      EXPECT_EQ(c[at], c[at + 2 * std::size_t(both.sc)]);
    }
}

TEST_F(TunableBatched, BatchOfOneIsThePlainGemmAndZeroDoesNothing) {
  REQUIRE_DEVICE();
  tunable::enable();
  tunable::set_max_tuning_iterations(2);
  Batch one(DType::float32, true, false, 5, 6, 7, 1);
  one.run(2.0, 1.0);
  EXPECT_LT(one.error(one.result(), 2.0, 1.0), 1e-5);
  std::vector<tunable::Result> r = tunable::get_results();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].op_signature, "GemmTunableOp_float_TN");
  EXPECT_EQ(r[0].params_signature, "tn_5_6_7_ld_8_9_6");
  Batch none(DType::float32, false, false, 4, 4, 4, 2);
  tunable::gemm_strided_batched('N', 'N', 4, 4, 4, 1.0, none.da.get(), none.lda, none.sa,
                                none.db.get(), none.ldb, none.sb, 0.0, none.dc.get(), none.ldc,
                                none.sc, 0, DType::float32, none.stream);
  EXPECT_EQ(none.result(), none.c0);
  EXPECT_EQ(tunable::get_results().size(), 1u);
}

TEST_F(TunableBatched, EveryBackendCandidateComputesTheBatch) {
  REQUIRE_DEVICE();
  Batch p(DType::float32, false, true, 12, 10, 16, 6, -1, 0);
  detail::GemmArgs g;
  g.type = detail::GemmType::float32;
  g.transpose_b = true;
  g.m = p.m, g.n = p.n, g.k = p.k;
  g.a = p.da.get(), g.b = p.db.get(), g.c = p.dc.get();
  g.lda = int(p.lda), g.ldb = int(p.ldb), g.ldc = int(p.ldc);
  g.batch = p.count, g.stride_a = p.sa, g.stride_b = p.sb, g.stride_c = p.sc;
  g.alpha = 0.5, g.beta = 2.0;
  const std::vector<detail::GemmPlanPtr> plans = detail::backend().gemm_candidates(0, g);
  for (const detail::GemmPlanPtr& plan : plans) {
    p.reset_c();
    Allocation ws = plan->workspace_bytes() ? allocate_device(plan->workspace_bytes()) : Allocation();
    plan->run(p.stream.handle(), g, ws.get());
    EXPECT_LT(p.error(p.result(), 0.5, 2.0), 1e-5) << plan->name();
    detail::GemmPlanPtr again = detail::backend().gemm_plan(0, g, plan->name());
    ASSERT_TRUE(again) << plan->name() << " is not rebuilt from its name for a batch";
  }
}

// ---- TunableOp ----

TEST_F(TunableBatched, TunesABatchUnderTorchsSignaturesAndReusesIt) {
  REQUIRE_DEVICE();
  Spy spy;
  spy.install("Test_Spy");
  const fs::path file = dir_ / "results.csv";
  tunable::set_filename(file.string());
  tunable::enable();
  tunable::set_max_tuning_iterations(3);
  Batch p(DType::float32, false, true, 16, 12, 20, 5);
  p.run(1.25, 0.5);  // beta != 0: tuning never writes the caller's C
  EXPECT_LT(p.error(p.result(), 1.25, 0.5), 1e-5);
  {
    std::lock_guard<std::mutex> l(spy.mu);
    ASSERT_FALSE(spy.seen.empty());
    for (const detail::GemmArgs& g : spy.seen) {  // the spy was timed on the whole batch
      EXPECT_EQ(g.batch, 5);
      EXPECT_EQ(g.stride_a, p.sa);
      EXPECT_EQ(g.stride_b, p.sb);
      EXPECT_EQ(g.stride_c, p.sc);
    }
  }
  std::vector<tunable::Result> r = tunable::get_results();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].op_signature, "GemmStridedBatchedTunableOp_float_NT");
  EXPECT_EQ(r[0].params_signature, "nt_16_12_20_B_5_ld_17_14_17");
  EXPECT_EQ(r[0].params_signature, p.params());
  EXPECT_NE(slurp(file).find("GemmStridedBatchedTunableOp_float_NT," + p.params() + "," + r[0].solution + ","),
            std::string::npos)
      << slurp(file);
  // Known now: no tuning again.
  const int runs = spy.runs.load();
  p.reset_c();
  p.run(1.25, 0.5);
  EXPECT_LT(p.error(p.result(), 1.25, 0.5), 1e-5);
  EXPECT_LE(spy.runs.load(), runs + 1);
  // The same signature with other strides (A broadcast): found, not retuned, and the
  // recorded solution runs for these strides.
  Batch q(DType::float32, false, true, 16, 12, 20, 5, /*sa=*/0, -1, 7);
  q.run();
  EXPECT_LT(q.error(q.result()), 1e-5);
  EXPECT_EQ(tunable::get_results().size(), 1u);
}

TEST_F(TunableBatched, KeyTellsStridesApartButNotForOneProduct) {
  detail::GemmArgs g;
  g.m = g.n = g.k = 8;
  g.lda = g.ldb = g.ldc = 8;
  g.batch = 4;
  g.stride_a = 64, g.stride_b = 64, g.stride_c = 64;
  detail::GemmArgs broadcast = g;
  broadcast.stride_a = 0;
  EXPECT_FALSE(td::GemmKey::of(0, g) == td::GemmKey::of(0, broadcast));
  EXPECT_EQ(td::op_signature(g), td::op_signature(broadcast));  // torch's signature has no strides
  EXPECT_EQ(td::params_signature(g), td::params_signature(broadcast));
  detail::GemmArgs more = g;
  more.batch = 5;
  EXPECT_FALSE(td::GemmKey::of(0, g) == td::GemmKey::of(0, more));
  detail::GemmArgs one = g, other_one = broadcast;
  one.batch = other_one.batch = 1;
  EXPECT_TRUE(td::GemmKey::of(0, one) == td::GemmKey::of(0, other_one));
  EXPECT_EQ(td::GemmKey::of(0, one).hash(), td::GemmKey::of(0, other_one).hash());
  EXPECT_EQ(td::op_signature(one), "GemmTunableOp_float_NN");
}

TEST_F(TunableBatched, SignaturesParseInBothForms) {
  std::string why;
  auto p = td::parse_op("GemmStridedBatchedTunableOp_Half_TN", why);
  ASSERT_TRUE(p) << why;
  EXPECT_TRUE(p->batched && p->transpose_a && !p->transpose_b);
  ASSERT_TRUE(td::parse_params("tn_128_128_64_B_96_ld_64_64_128", *p, why)) << why;
  EXPECT_EQ(p->batch, 96);
  EXPECT_EQ(p->k, 64);
  EXPECT_EQ(p->lda, 64);
  EXPECT_EQ(p->ldc, 128);
  ASSERT_TRUE(td::parse_params("tn_8_4_2_B_3", *p, why)) << why;  // older torch: no "_ld_"
  EXPECT_EQ(p->batch, 3);
  EXPECT_EQ(p->lda, 0);
  EXPECT_FALSE(td::parse_params("tn_8_4_2_ld_2_2_8", *p, why));
  EXPECT_NE(why.find("have no batch"), std::string::npos) << why;
  EXPECT_FALSE(td::parse_params("tn_8_4_2_B_x_ld_2_2_8", *p, why));
  EXPECT_NE(why.find("batch count"), std::string::npos) << why;
  auto plain = td::parse_op("GemmTunableOp_float_NN", why);
  ASSERT_TRUE(plain);
  EXPECT_FALSE(td::parse_params("nn_8_8_8_B_2_ld_8_8_8", *plain, why));
  EXPECT_NE(why.find("plain GemmTunableOp"), std::string::npos) << why;
  EXPECT_FALSE(td::parse_op("GemmAndBiasTunableOp_float_NN", why));
  EXPECT_NE(why.find("GemmAndBiasTunableOp_float_NN"), std::string::npos) << why;
  // torch's docs example, and a malformed batched line in a file, which names the line.
  EXPECT_NO_THROW(td::parse_results("Validator,PT_VERSION,2.11.0\nGemmStridedBatchedTunableOp_float_TN,"
                                    "tn_128_128_64_B_96_ld_64_64_128,Default,0.5\n", "t.csv"));
  try {
    td::parse_results("Validator,PT_VERSION,2.11.0\nGemmStridedBatchedTunableOp_float_TN,tn_1_1_1,Default,1\n",
                      "bad.csv");
    ADD_FAILURE() << "a batched op without a batch was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv', line 2"), std::string::npos) << e.what();
  }
}

TEST_F(TunableBatched, NumericalCheckComparesEveryProduct) {
  REQUIRE_DEVICE();
  // Computes the first product only: right on matrix 0, wrong on the others.
  std::atomic<int> first_only{0};
  td::register_extra_candidate(td::ExtraCandidate{
      "Test_FirstOnly", nullptr, [&](int device, detail::StreamHandle s, const detail::GemmArgs& g) {
        ++first_only;
        detail::GemmArgs one = g;
        one.batch = 1;
        detail::backend().gemm(device, s, one);
      }});
  tunable::enable();
  tunable::set_max_tuning_iterations(3);
  tunable::set_numerical_check_tolerances(true, 1e-4, 1e-4);
  Batch p(DType::float32, false, false, 10, 8, 12, 4);
  p.run();
  EXPECT_LT(p.error(p.result()), 1e-5);
  const std::vector<tunable::Result> r = tunable::get_results();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].solution, "Test_FirstOnly");
  EXPECT_EQ(first_only.load(), 1) << "checked once, then dropped before any timing";
  td::clear_extra_candidates();
}

TEST_F(TunableBatched, ResultsFileRoundTripRunsTheRecordedSolution) {
  REQUIRE_DEVICE();
  Spy marker;
  marker.install("Test_Marker");
  Batch p(DType::bfloat16, true, true, 8, 6, 10, 3);
  std::string text;
  for (auto& [k, v] : tunable::get_validators()) text += "Validator," + k + "," + v + "\n";
  text += "GemmStridedBatchedTunableOp_BFloat16_TT," + p.params() + ",Test_Marker,0.25\n";
  text += "GemmStridedBatchedTunableOp_Half_NN,nn_64_64_64_B_8_ld_64_64_64,Default,0.01\n";
  td::store().reset_for_testing();
  spit(dir_ / "known.csv", text);
  tunable::set_filename((dir_ / "known.csv").string());
  tunable::enable();
  tunable::tuning_enable(false);
  p.run();
  EXPECT_EQ(marker.runs.load(), 1);
  EXPECT_EQ(marker.seen.at(0).batch, 3);
  EXPECT_LT(p.error(p.result()), tolerance(DType::bfloat16));
  // Written back, read again: both batched entries survive unchanged.
  ASSERT_TRUE(tunable::write_file((dir_ / "again.csv").string()));
  td::store().reset_for_testing();
  ASSERT_TRUE(tunable::read_file((dir_ / "again.csv").string())) << warnings();
  std::vector<tunable::Result> r = tunable::get_results();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].op_signature, "GemmStridedBatchedTunableOp_BFloat16_TT");
  EXPECT_EQ(r[0].params_signature, p.params());
  EXPECT_EQ(r[0].solution, "Test_Marker");
  EXPECT_DOUBLE_EQ(r[0].time_ms, 0.25);
  // torch's flavour keeps the batched Default entry (torch 2.11 reads it) and leaves out the
  // solution only cudakit knows.
  ASSERT_TRUE(tunable::write_file_for_torch((dir_ / "torch.csv").string(), "2.11.0+cu130"));
  const std::string for_torch = slurp(dir_ / "torch.csv");
  EXPECT_NE(for_torch.find("\nGemmStridedBatchedTunableOp_Half_NN,nn_64_64_64_B_8_ld_64_64_64,Default,0.01\n"),
            std::string::npos)
      << for_torch;
  EXPECT_EQ(for_torch.find("Test_Marker"), std::string::npos);
}

TEST_F(TunableBatched, OfflineTuningRunsBatchedLinesWithPackedStrides) {
  REQUIRE_DEVICE();
  Spy spy;
  spy.install("Test_Spy");
  tunable::enable();
  tunable::set_max_tuning_iterations(2);
  tunable::set_filename((dir_ / "offline.csv").string());
  spit(dir_ / "untuned.csv",
       "GemmStridedBatchedTunableOp_Half_TN,tn_16_8_24_B_5_ld_24_24_16\n"
       "GemmStridedBatchedTunableOp_float_NN,nn_8_6_4_B_3\n"
       "GemmAndBiasTunableOp_float_NN,nn_8_8_8_ld_8_8_8\n");
  tunable::tune_gemm_in_file((dir_ / "untuned.csv").string());
  std::vector<std::pair<std::string, std::string>> got;
  for (const tunable::Result& r : tunable::get_results()) got.emplace_back(r.op_signature, r.params_signature);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"GemmStridedBatchedTunableOp_Half_TN", "tn_16_8_24_B_5_ld_24_24_16"},
      {"GemmStridedBatchedTunableOp_float_NN", "nn_8_6_4_B_3_ld_8_4_8"}};
  EXPECT_EQ(got, want);
  EXPECT_NE(warnings().find("skips GemmAndBiasTunableOp_float_NN"), std::string::npos) << warnings();
  // Packed strides: leading dimension x stored columns.
  std::lock_guard<std::mutex> l(spy.mu);
  bool saw_half = false;
  for (const detail::GemmArgs& g : spy.seen) {
    if (g.type != detail::GemmType::float16) continue;
    saw_half = true;
    EXPECT_EQ(g.batch, 5);
    EXPECT_EQ(g.stride_a, 24 * 16);  // A is k x m (transposed), lda 24
    EXPECT_EQ(g.stride_b, 24 * 8);
    EXPECT_EQ(g.stride_c, 16 * 8);
  }
  EXPECT_TRUE(saw_half);
}

TEST_F(TunableBatched, BadArgumentsAreClearErrorsAndChangeNothing) {
  REQUIRE_DEVICE();
  tunable::enable();
  tunable::set_max_tuning_iterations(2);
  Batch p(DType::float32, false, false, 4, 4, 4, 3);
  p.run();  // tuned: one result
  ASSERT_EQ(tunable::get_results().size(), 1u);
  const std::vector<double> before = p.result();
  auto call = [&](std::int64_t sa, std::int64_t sc, std::int64_t count, char ta, std::int64_t ldc) {
    tunable::gemm_strided_batched(ta, 'N', 4, 4, 4, 1.0, p.da.get(), p.lda, sa, p.db.get(), p.ldb, p.sb,
                                  0.0, p.dc.get(), ldc, sc, count, DType::float32, p.stream);
  };
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[&] { call(p.sa, p.sc, -1, 'N', p.ldc); }, "argument 'batch_count' must be in [0, 2^31)"},
      {[&] { call(p.sa, p.sc, std::int64_t(1) << 31, 'N', p.ldc); }, "got 2147483648"},
      {[&] { call(-4, p.sc, 3, 'N', p.ldc); }, "argument 'stride_a' must be >= 0"},
      {[&] { call(p.sa, 0, 3, 'N', p.ldc); }, "argument 'stride_c' must be > 0 when batch_count > 1"},
      {[&] { call(p.sa, -1, 1, 'N', p.ldc); }, "argument 'stride_c'"},
      {[&] { call(p.sa, p.sc, 3, 'C', p.ldc); }, "tunable::gemm_strided_batched(): argument 'transa'"},
      {[&] { call(p.sa, p.sc, 3, 'N', 2); }, "argument 'ldc' must be at least 4"},
  };
  for (const auto& [fn, text] : cases) {
    try {
      fn();
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(p.result(), before);  // nothing ran
  EXPECT_EQ(tunable::get_results().size(), 1u);
  EXPECT_TRUE(tunable::is_enabled());
  // stride_c 0 is fine for a single product; the state still works.
  EXPECT_NO_THROW(call(p.sa, 0, 1, 'N', p.ldc));
  p.reset_c();
  p.run();
  EXPECT_LT(p.error(p.result()), 1e-5);
}

TEST_F(TunableBatched, CapturedBatchReplays) {
  REQUIRE_DEVICE();
  tunable::enable();
  tunable::set_max_tuning_iterations(2);
  Stream side;
  Batch p(DType::float32, true, false, 6, 6, 6, 4);
  {
    StreamGuard on(side);
    p.stream = side;
    CUDAGraph graph;
    graph.capture_begin();
    p.run();
    graph.capture_end();
    EXPECT_TRUE(tunable::get_results().empty());  // no tuning inside a capture
    graph.replay();
    side.sync();
    EXPECT_LT(p.error(p.result()), 1e-5);
  }
  p.run();  // outside the capture: tuned now
  side.sync();
  EXPECT_EQ(tunable::get_results().size(), 1u);
}

// ---- matmul of N-D tensors through TunableOp ----

Tensor host_values(const Shape& shape, unsigned seed) {
  Tensor t = empty(shape, TensorOptions{DType::float32, Device::cpu(), false});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

TEST_F(TunableBatched, BatchedMatmulHasTorchsBmmSignature) {
  REQUIRE_DEVICE();
  tunable::enable();
  tunable::set_max_tuning_iterations(2);
  const Tensor ha = host_values({4, 3, 5}, 1), hb = host_values({4, 5, 2}, 2);
  Tensor c = matmul(ha.to(Device::cuda(0)), hb.to(Device::cuda(0))).cpu();
  ASSERT_EQ(c.sizes(), (Shape{4, 3, 2}));
  const Tensor ref = matmul(ha, hb);  // the host reference loop
  for (std::int64_t i = 0; i < c.numel(); ++i) EXPECT_NEAR(c.data<float>()[i], ref.data<float>()[i], 1e-5);
  // torch.bmm(a, b) on these contiguous tensors: the BLAS product b^T a^T per matrix.
  std::vector<tunable::Result> r = tunable::get_results();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].op_signature, "GemmStridedBatchedTunableOp_float_NN");
  EXPECT_EQ(r[0].params_signature, "nn_2_3_5_B_4_ld_2_5_2");
  // A batch against one matrix folds into one plain GEMM, as torch.matmul does.
  Tensor d = matmul(ha.to(Device::cuda(0)), host_values({5, 2}, 3).to(Device::cuda(0)));
  EXPECT_EQ(d.sizes(), (Shape{4, 3, 2}));
  r = tunable::get_results();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].op_signature, "GemmStridedBatchedTunableOp_float_NN");
  EXPECT_EQ(r[1].op_signature, "GemmTunableOp_float_NN");
  EXPECT_EQ(r[1].params_signature, "nn_2_12_5_ld_2_5_2");
}

}  // namespace
