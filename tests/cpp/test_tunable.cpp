// TunableOp (include/cudakit/tunable.hpp, src/tunable): the results-file format against torch's,
// signatures, settings and environment, and tuning end to end through tunable::gemm on the
// backend in use (emulated in CI: CPU-loop candidates; cuda on the GPU host: cuBLASLt).
// Injected candidates (register_extra_candidate) stand in for a wrong, a marked and a spying
// implementation; they work on every backend because they call the backend's own GEMM.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tunable.hpp"
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

int count_lines_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

// ---- the file format ----

// A file as torch writes it (ROCm example of torch's docs, with its BLAS log, a batched entry,
// CRLF line ends and a blank line), which cudakit must read without loss.
const char* kTorchRocmFile =
    "Validator,PT_VERSION,2.4.0\r\n"
    "Validator,ROCM_VERSION,6.0.0.0-91-08e5094\r\n"
    "Validator,GCN_ARCH_NAME,gfx942:sramecc+:xnack-\r\n"
    "GemmTunableOp_float_NN,nn_1024_512_2048_ld_1024_2048_1024,Gemm_Hipblaslt_NN_52565,0.0653662\r\n"
    "\r\n"
    "GemmTunableOp_float_NT,nt_256_128_512,Gemm_Rocblas_21,0.00793602\r\n"
    "GemmStridedBatchedTunableOp_Half_TN,tn_64_64_64_B_8_ld_64_64_64,Default,0.01\r\n"
    "GemmTunableOp_BFloat16_TN,tn_512_256_4096_ld_4096_4096_512,Default,0.1,BLAS_PARAMS: - { "
    "function: matmul, M: 512, N: 256 }\r\n";

TEST(TunableFile, ReadsTorchsFormat) {
  td::ResultsFile f = td::parse_results(kTorchRocmFile, "torch.csv");
  EXPECT_EQ(f.validators.size(), 3u);
  EXPECT_EQ(f.validators["GCN_ARCH_NAME"], "gfx942:sramecc+:xnack-");
  ASSERT_EQ(f.results.size(), 4u);
  const td::ResultEntry& e = f.results["GemmTunableOp_float_NN"]["nn_1024_512_2048_ld_1024_2048_1024"];
  EXPECT_EQ(e.solution, "Gemm_Hipblaslt_NN_52565");
  EXPECT_DOUBLE_EQ(e.time_ms, 0.0653662);
  EXPECT_EQ(f.results["GemmTunableOp_float_NT"]["nt_256_128_512"].solution, "Gemm_Rocblas_21");
  EXPECT_EQ(f.results["GemmStridedBatchedTunableOp_Half_TN"].size(), 1u);  // a batched entry
  EXPECT_DOUBLE_EQ(f.results["GemmTunableOp_BFloat16_TN"]["tn_512_256_4096_ld_4096_4096_512"].time_ms, 0.1);
  // The time is optional.
  td::ResultsFile g = td::parse_results("Validator,PT_VERSION,2.11.0\nGemmTunableOp_float_NN,nn_1_2_3,Default\n", "x");
  EXPECT_EQ(g.results["GemmTunableOp_float_NN"]["nn_1_2_3"].time_ms, 0.0);
}

TEST(TunableFile, RoundTripsTextAndTables) {
  const std::string text =
      "Validator,CUDAKIT_VERSION,0.1.0\n"
      "Validator,CUBLASLT_VERSION,13.1.0\n"
      "GemmTunableOp_BFloat16_NN,nn_4096_16_4096_ld_4096_4096_4096,Gemm_Cublaslt_id_21_tile_"
      "18_stages_20_splitk_4_red_2_swizzle_0_custom_0_inner_0_cluster_0,0.0089\n"
      "GemmTunableOp_float_TN,tn_64_64_64_ld_64_64_64,Default,0.0105563\n"
      "GemmTunableOp_tf32_NT,nt_8_8_8_ld_8_8_8,Default,1.262\n";
  td::ResultsFile f = td::parse_results(text, "a.csv");
  // Written back exactly (validators and results sorted, times in torch's format).
  std::string sorted = td::format_results(f.validators, f.results);
  td::ResultsFile again = td::parse_results(sorted, "b.csv");
  EXPECT_EQ(td::format_results(again.validators, again.results), sorted);
  EXPECT_NE(sorted.find("GemmTunableOp_float_TN,tn_64_64_64_ld_64_64_64,Default,0.0105563\n"),
            std::string::npos);
  EXPECT_NE(sorted.find(",1.262\n"), std::string::npos);
  // Torch's own ROCm file keeps every entry through a write.
  td::ResultsFile torch = td::parse_results(kTorchRocmFile, "t.csv");
  td::ResultsFile through = td::parse_results(td::format_results(torch.validators, torch.results), "u.csv");
  EXPECT_EQ(through.results.size(), torch.results.size());
  EXPECT_EQ(through.validators, torch.validators);
}

TEST(TunableFile, MalformedLinesNameFileAndLine) {
  struct Case {
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {"Validator,PT_VERSION\n", "line 1: a Validator line"},
      {"Validator,A,1\nValidator,A,2\n", "line 2: validator A is given twice"},
      {"Validator,A,1\nGemmTunableOp_float_NN,nn_1_1_1_ld_1_1_1\n", "line 2: a result line"},
      {"GemmTunableOp_float_NN,nn_1_1_1,BLAS_PARAMS: - { function: matmul }\n", "untuned line"},
      {"\nGemmTunableOp_float_NN,nn_1_1_1,Default,fast\n", "line 2: the time 'fast'"},
      {"GemmTunableOp_float_NN,nn_1_1_1,Default,-1\n", "the time '-1'"},
      {"GemmTunableOp_float_NN,,Default,1\n", "a field is empty"},
      {"GemmTunableOp_float_NN,nn_1_1_1,Default,1,extra\n", "unexpected fields"},
      {"GemmTunableOp_float_NN,nn_x_1_1,Default,1\n", "m, n and k must be whole numbers"},
      {"GemmTunableOp_float_NN,nt_1_1_1,Default,1\n", "other transposes than their op"},
      {"GemmTunableOp_float_NN,nn_1_1_1_ld_0_1_1,Default,1\n", "leading dimensions must be positive"},
      {"GemmTunableOp_float_NN,nn_1_1,Default,1\n", "are not <ta><tb>_<m>_<n>_<k>"},
      {"GemmTunableOp_float_XY,nn_1_1_1,Default,1\n", ""},  // unknown op form: kept verbatim
  };
  for (const Case& c : cases) {
    if (c.expect.empty()) {
      EXPECT_NO_THROW(td::parse_results(c.text, "bad.csv")) << c.text;
      continue;
    }
    try {
      td::parse_results(c.text, "bad.csv");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const ValueError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'bad.csv'"), std::string::npos) << what;
      EXPECT_NE(what.find(c.expect), std::string::npos) << what;
    }
  }
}

TEST(TunableFile, TorchValidatorVersionIsMajorMinorPatch) {
  // torch checks PT_VERSION against its C++ TORCH_VERSION ("2.11.0"), not torch.__version__.
  EXPECT_EQ(td::torch_validator_version("2.11.0+cu130"), "2.11.0");
  EXPECT_EQ(td::torch_validator_version("2.12.0a0+git1a2b3c"), "2.12.0");
  EXPECT_EQ(td::torch_validator_version("2.11.0"), "2.11.0");
  EXPECT_EQ(td::torch_validator_version("10.2.33.post1"), "10.2.33");
  EXPECT_EQ(td::torch_validator_version("nightly"), "nightly");
  EXPECT_EQ(td::torch_validator_version("2.11"), "2.11");
  EXPECT_EQ(td::torch_validator_version("2.x.0"), "2.x.0");
}

TEST(TunableFile, ValidatorRules) {
  const td::ValidatorMap ours{{"CUDAKIT_VERSION", "0.1.0"}, {"CUBLASLT_VERSION", "13.1.0"}};
  EXPECT_FALSE(td::validators_mismatch(ours, ours));
  // torch's file (PT_VERSION only) is accepted: its solutions are rebuilt or fall back.
  EXPECT_FALSE(td::validators_mismatch({{"PT_VERSION", "2.11.0+cu130"}}, ours));
  // ...but not when it names another library version we check.
  auto why = td::validators_mismatch({{"PT_VERSION", "2.11.0"}, {"CUBLASLT_VERSION", "12.9.0"}}, ours);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("CUBLASLT_VERSION is '12.9.0' in the file but '13.1.0' here"), std::string::npos);
  why = td::validators_mismatch({{"PT_VERSION", "2.4.0"}, {"HIPBLASLT_VERSION", "0.7.0"}}, ours);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("HIPBLASLT_VERSION"), std::string::npos);
  why = td::validators_mismatch({{"CUDAKIT_VERSION", "0.1.0"}}, ours);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("lacks validator CUBLASLT_VERSION"), std::string::npos);
  EXPECT_TRUE(td::validators_mismatch({}, ours));
  EXPECT_EQ(td::sanitize_field("a,b\nc"), "a;b c");
}

// ---- signatures ----

detail::GemmArgs args(detail::GemmType t, bool ta, bool tb, int m, int n, int k, int lda, int ldb,
                      int ldc, bool tf32 = false) {
  detail::GemmArgs g;
  g.type = t;
  g.transpose_a = ta;
  g.transpose_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  g.allow_tf32 = tf32;
  return g;
}

TEST(TunableSignature, MatchesTorchsSpelling) {
  // torch.mm(x[16,4096], w[4096,4096]) in bfloat16: the BLAS product w^T x^T.
  auto g = args(detail::GemmType::bfloat16, false, false, 4096, 16, 4096, 4096, 4096, 4096);
  EXPECT_EQ(td::op_signature(g), "GemmTunableOp_BFloat16_NN");
  EXPECT_EQ(td::params_signature(g), "nn_4096_16_4096_ld_4096_4096_4096");
  g = args(detail::GemmType::float32, true, false, 25088, 4096, 64, 64, 64, 25088, true);
  EXPECT_EQ(td::op_signature(g), "GemmTunableOp_tf32_TN");
  EXPECT_EQ(td::params_signature(g), "tn_25088_4096_64_ld_64_64_25088");
  EXPECT_EQ(td::op_signature(args(detail::GemmType::float64, false, true, 1, 1, 1, 1, 1, 1)),
            "GemmTunableOp_double_NT");
  EXPECT_EQ(td::op_signature(args(detail::GemmType::float16, true, true, 1, 1, 1, 1, 1, 1)),
            "GemmTunableOp_Half_TT");
  EXPECT_EQ(td::op_signature(args(detail::GemmType::float32, false, false, 1, 1, 1, 1, 1, 1)),
            "GemmTunableOp_float_NN");
}

TEST(TunableSignature, ParsesBothParamsForms) {
  std::string why;
  auto p = td::parse_op("GemmTunableOp_tf32_TN", why);
  ASSERT_TRUE(p) << why;
  EXPECT_TRUE(p->allow_tf32 && p->transpose_a && !p->transpose_b);
  ASSERT_TRUE(td::parse_params("tn_25088_4096_64_ld_64_64_25088", *p, why)) << why;
  EXPECT_EQ(p->m, 25088);
  EXPECT_EQ(p->lda, 64);
  EXPECT_EQ(p->ldc, 25088);
  ASSERT_TRUE(td::parse_params("tn_8_4_2", *p, why)) << why;  // torch before 2.6: no "_ld_"
  EXPECT_EQ(p->k, 2);
  EXPECT_EQ(p->lda, 0);
  EXPECT_FALSE(td::parse_op("GemmTunableOp_c10::complex<float>_NN", why));
  EXPECT_NE(why.find("not one cudakit multiplies"), std::string::npos);
  EXPECT_FALSE(td::parse_op("GemmAndBiasTunableOp_float_NN", why));  // batched: test_tunable_batched
  EXPECT_FALSE(td::parse_params("nn_99999999999_1_1", *p, why));
}

// ---- settings and environment ----

class TunableTest : public tunable_test::TunableFixture {};

struct EnvVar {
  std::string name;
  EnvVar(std::string n, const std::string& value) : name(std::move(n)) { setenv(name.c_str(), value.c_str(), 1); }
  ~EnvVar() { unsetenv(name.c_str()); }
};

TEST_F(TunableTest, EnvironmentOverridesAndCudakitPrefixWins) {
  {
    EnvVar a("PYTORCH_TUNABLEOP_MAX_TUNING_ITERATIONS", "7");
    EnvVar b("PYTORCH_TUNABLEOP_ENABLED", "1");
    EnvVar c("PYTORCH_TUNABLEOP_TUNING", "0");
    EnvVar d("PYTORCH_TUNABLEOP_NUMERICAL_CHECK", "1e-3_2e-2");
    EnvVar e("PYTORCH_TUNABLEOP_ROTATING_BUFFER_SIZE", "3");
    td::settings_unchecked().reload_environment();
    EXPECT_EQ(tunable::get_max_tuning_iterations(), 7);
    tunable::set_max_tuning_iterations(50);  // the environment wins, as in torch
    EXPECT_EQ(tunable::get_max_tuning_iterations(), 7);
    EXPECT_TRUE(tunable::is_enabled());
    tunable::enable(false);
    EXPECT_TRUE(tunable::is_enabled());
    EXPECT_FALSE(tunable::tuning_is_enabled());
    const tunable::NumericalCheck n = tunable::numerical_check();
    EXPECT_TRUE(n.enabled);
    EXPECT_DOUBLE_EQ(n.atol, 1e-3);
    EXPECT_DOUBLE_EQ(n.rtol, 2e-2);
    EXPECT_EQ(tunable::get_rotating_buffer_size(), 3 << 20);
    EnvVar f("CUDAKIT_TUNABLEOP_MAX_TUNING_ITERATIONS", "9");
    td::settings_unchecked().reload_environment();
    EXPECT_EQ(tunable::get_max_tuning_iterations(), 9);
  }
  td::settings_unchecked().reload_environment();
  EXPECT_EQ(tunable::get_max_tuning_iterations(), 50);
  EXPECT_FALSE(tunable::is_enabled());
}

TEST_F(TunableTest, MalformedEnvironmentIsAClearError) {
  for (auto [var, value] : std::vector<std::pair<std::string, std::string>>{
           {"PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS", "30ms"},
           {"PYTORCH_TUNABLEOP_ENABLED", "yes"},
           {"CUDAKIT_TUNABLEOP_NUMERICAL_CHECK", "1e-3"},
           {"PYTORCH_TUNABLEOP_NUMERICAL_CHECK", "0_1"}}) {
    {
      EnvVar e(var, value);
      td::settings_unchecked().reload_environment();
      try {
        tunable::is_enabled();
        ADD_FAILURE() << var << "=" << value << " accepted";
      } catch (const ValueError& err) {
        EXPECT_NE(std::string(err.what()).find(var + "='" + value + "'"), std::string::npos) << err.what();
      }
    }
    td::settings_unchecked().reload_environment();
    EXPECT_NO_THROW(tunable::is_enabled());
  }
}

TEST_F(TunableTest, SettersCheckTheirArguments) {
  EXPECT_THROW(tunable::set_max_tuning_duration(-1), ValueError);
  EXPECT_THROW(tunable::set_max_tuning_iterations(-5), ValueError);
  EXPECT_THROW(tunable::set_max_warmup_iterations(-1), ValueError);
  EXPECT_THROW(tunable::set_numerical_check_tolerances(true, 0.0, 1e-3), ValueError);
  EXPECT_THROW(tunable::set_numerical_check_tolerances(true, 1e-3, NAN), ValueError);
  EXPECT_THROW(tunable::set_filename("a\nb.csv"), ValueError);
  EXPECT_THROW(tunable::write_file_for_torch(dir_ / "t.csv", ""), ValueError);
  tunable::set_max_tuning_duration(5);
  EXPECT_EQ(tunable::get_max_tuning_duration(), 5);
  tunable::set_rotating_buffer_size(0);
  EXPECT_EQ(tunable::get_rotating_buffer_size(), 0);
  tunable::set_filename("res%d_x.csv", true);
  EXPECT_EQ(tunable::get_filename(), "res" + std::to_string(td::current_device_or_zero()) + "_x.csv");
  EXPECT_EQ(td::insert_ordinal("tunableop_results.csv", 3), "tunableop_results3.csv");
  EXPECT_EQ(td::insert_ordinal("a/b.c/results", 1), "a/b.c/results1");  // not into the directory
  EXPECT_EQ(td::insert_ordinal("a/b.c/r.csv", 2), "a/b.c/r2.csv");
}

// ---- tuning end to end ----

using detail::GemmType;

// float32 operands on the device (column-major, BLAS terms).
struct Problem {
  int m, n, k;
  std::vector<float> a, b, c0;
  Allocation da, db, dc;
  StreamRef stream = current_stream();

  Problem(int m_, int n_, int k_, unsigned seed = 1) : m(m_), n(n_), k(k_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    a.resize(static_cast<std::size_t>(m) * k);
    b.resize(static_cast<std::size_t>(k) * n);
    c0.resize(static_cast<std::size_t>(m) * n);
    for (auto* v : {&a, &b, &c0})
      for (float& x : *v) x = u(rng);
    da = upload(a);
    db = upload(b);
    dc = upload(c0);
  }
  Allocation upload(const std::vector<float>& v) {
    Allocation d = allocate_device(v.size() * 4);
    detail::backend().memcpy_async(d.get(), v.data(), v.size() * 4, stream.handle());
    stream.sync();
    return d;
  }
  std::vector<float> result() {
    std::vector<float> out(static_cast<std::size_t>(m) * n);
    detail::backend().memcpy_async(out.data(), dc.get(), out.size() * 4, stream.handle());
    stream.sync();
    return out;
  }
  void reset_c() {
    detail::backend().memcpy_async(dc.get(), c0.data(), c0.size() * 4, stream.handle());
    stream.sync();
  }
  void run(double alpha = 1, double beta = 0) {
    tunable::gemm('N', 'N', m, n, k, alpha, da.get(), m, db.get(), k, beta, dc.get(), m,
                  DType::float32, stream);
  }
  // Largest error against alpha * A B + beta * C0, relative to the largest |expected|.
  double error(const std::vector<float>& got, double alpha = 1, double beta = 0) const {
    double worst = 0, scale = 1e-30;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int p = 0; p < k; ++p) s += double(a[i + std::size_t(p) * m]) * b[p + std::size_t(j) * k];
        const double want = alpha * s + beta * c0[i + std::size_t(j) * m];
        worst = std::max(worst, std::fabs(want - got[i + std::size_t(j) * m]));
        scale = std::max(scale, std::fabs(want));
      }
    return worst / scale;
  }
  std::string params() const {
    return "nn_" + std::to_string(m) + "_" + std::to_string(n) + "_" + std::to_string(k) + "_ld_" +
           std::to_string(m) + "_" + std::to_string(k) + "_" + std::to_string(m);
  }
};

bool have_device() { return detail::backend().device_count() > 0; }
#define REQUIRE_DEVICE()                                                   \
  do {                                                                     \
    if (!have_device()) GTEST_SKIP() << "no device on this backend";       \
  } while (0)

// A correct candidate (the backend's own GEMM) that counts its runs and the operands it saw.
struct Spy {
  std::atomic<int> runs{0};
  std::mutex mu;
  std::vector<std::pair<const void*, void*>> seen;  // (a, c) of each run, in order
  void install(const std::string& name) {
    td::register_extra_candidate(td::ExtraCandidate{
        name, nullptr, [this](int device, detail::StreamHandle s, const detail::GemmArgs& g) {
          ++runs;
          {
            std::lock_guard<std::mutex> l(mu);
            seen.emplace_back(g.a, g.c);
          }
          detail::backend().gemm(device, s, g);
        }});
  }
  // The runs made while tuning: all but the product itself when the spy won.
  std::vector<std::pair<const void*, void*>> tuning_runs(const void* caller_c) {
    std::lock_guard<std::mutex> l(mu);
    std::vector<std::pair<const void*, void*>> out = seen;
    if (!out.empty() && out.back().second == caller_c) out.pop_back();
    return out;
  }
};

TEST_F(TunableTest, DisabledRunsTheBackendGemmAndRecordsNothing) {
  REQUIRE_DEVICE();
  Problem p(24, 20, 16);
  tunable::set_filename((dir_ / "r.csv").string());
  p.run(2.0, 0.5);
  EXPECT_LT(p.error(p.result(), 2.0, 0.5), 1e-5);
  EXPECT_TRUE(tunable::get_results().empty());
  EXPECT_FALSE(fs::exists(dir_ / "r.csv"));
}

TEST_F(TunableTest, TunesRecordsAppendsAndReuses) {
  REQUIRE_DEVICE();
  Spy spy;
  spy.install("Test_Spy");
  const fs::path file = dir_ / "results.csv";
  tunable::set_filename(file.string());
  tunable::enable();
  tunable::set_max_tuning_iterations(3);
  Problem p(48, 40, 64);
  p.run(1.5, 0.25);  // beta != 0: tuning never writes the caller's C
  EXPECT_LT(p.error(p.result(), 1.5, 0.25), 1e-5);
  EXPECT_GE(spy.runs.load(), 1 + td::kProbeIterations);  // the spy was a candidate
  std::vector<tunable::Result> r = tunable::get_results();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].op_signature, "GemmTunableOp_float_NN");
  EXPECT_EQ(r[0].params_signature, p.params());
  EXPECT_GT(r[0].time_ms, 0);
  // Appended at once, after this process's validators.
  const std::string text = slurp(file);
  EXPECT_EQ(count_lines_starting(text, "Validator,"), static_cast<int>(tunable::get_validators().size()));
  EXPECT_EQ(count_lines_starting(text, "GemmTunableOp_float_NN," + p.params() + "," + r[0].solution), 1);
  EXPECT_NE(text.find("Validator,CUDAKIT_VERSION,"), std::string::npos);
  // Known now: no tuning again, the same answer.
  const int runs = spy.runs.load();
  p.reset_c();
  p.run(1.5, 0.25);
  EXPECT_LT(p.error(p.result(), 1.5, 0.25), 1e-5);
  EXPECT_EQ(tunable::get_results().size(), 1u);
  EXPECT_LE(spy.runs.load(), runs + 1);  // at most the chosen run itself
  EXPECT_EQ(count_lines_starting(slurp(file), "GemmTunableOp_"), 1);
}

TEST_F(TunableTest, RecordedSolutionRunsFromAFile) {
  REQUIRE_DEVICE();
  Spy marker;
  marker.install("Test_Marker");
  Problem p(32, 8, 16);
  // A results file naming the marker for this problem, with this process's validators.
  std::string text;
  for (auto& [k, v] : tunable::get_validators()) text += "Validator," + k + "," + v + "\n";
  text += "GemmTunableOp_float_NN," + p.params() + ",Test_Marker,0.5\n";
  td::store().reset_for_testing();
  spit(dir_ / "known.csv", text);
  tunable::set_filename((dir_ / "known.csv").string());
  tunable::enable();
  tunable::tuning_enable(false);
  p.run();
  EXPECT_EQ(marker.runs.load(), 1);
  EXPECT_LT(p.error(p.result()), 1e-5);
  auto r = tunable::get_results();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].solution, "Test_Marker");
  EXPECT_DOUBLE_EQ(r[0].time_ms, 0.5);
}

TEST_F(TunableTest, SolutionThatCannotRunHereFallsBackToDefault) {
  REQUIRE_DEVICE();
  Problem p(16, 16, 16);
  spit(dir_ / "torch.csv",
       "Validator,PT_VERSION,2.11.0+cu130\n"
       "GemmTunableOp_float_NN," + p.params() + ",Gemm_No_Such_Solution_7,0.01\n");
  tunable::set_filename((dir_ / "torch.csv").string());
  tunable::enable();
  p.run();
  EXPECT_LT(p.error(p.result()), 1e-5);
  EXPECT_NE(warnings().find("'Gemm_No_Such_Solution_7'"), std::string::npos) << warnings();
  EXPECT_EQ(tunable::get_results().size(), 1u);  // the torch file's entry, not retuned
}

TEST_F(TunableTest, NumericalCheckRejectsAWrongCandidate) {
  REQUIRE_DEVICE();
  // The injected candidate enqueues nothing: the fastest by far, and wrong.
  td::register_extra_candidate(td::ExtraCandidate{
      "Test_Wrong", nullptr, [](int, detail::StreamHandle, const detail::GemmArgs&) {}});
  tunable::set_filename("");
  tunable::enable();
  // Enough work that Default's time stands above the timing noise of a busy (or TSan) host:
  // the no-op must beat it by kDefaultMargin to win.
  tunable::set_max_tuning_iterations(20);
  {
    Problem p(128, 96, 128, 2);
    p.run();
    auto r = tunable::get_results();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].solution, "Test_Wrong") << "without the check, the wrong candidate wins";
  }
  td::store().reset_for_testing();
  tunable::set_numerical_check_tolerances(true, 1e-3, 1e-3);
  Problem p(40, 24, 32, 3);
  p.run();
  auto r = tunable::get_results();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].solution, "Test_Wrong");
  EXPECT_LT(p.error(p.result()), 1e-5);
}

TEST_F(TunableTest, RotatingBufferCyclesOperandCopies) {
  REQUIRE_DEVICE();
  Spy spy;
  spy.install("Test_Spy");
  tunable::set_filename("");
  tunable::enable();
  tunable::set_max_tuning_iterations(20);
  tunable::set_rotating_buffer_size(1);  // 1 MiB of copies of a 48 KiB problem: 22 sets
  Problem p(64, 64, 64);
  p.run();
  EXPECT_LT(p.error(p.result()), 1e-5);
  // The spy's warm-up and probe runs each used another copy of the operands, never the
  // caller's (the copies are shared round-robin by every candidate's runs).
  auto runs = spy.tuning_runs(p.dc.get());
  ASSERT_GE(runs.size(), 3u);
  std::set<const void*> as, cs;
  for (auto [a, c] : runs) {
    EXPECT_NE(a, p.da.get());
    EXPECT_NE(c, p.dc.get()) << "tuning wrote the caller's C";
    as.insert(a);
    cs.insert(c);
  }
  EXPECT_GE(as.size(), std::min<std::size_t>(runs.size(), 3));
  EXPECT_LE(as.size(), 22u);  // 1 MiB / 48 KiB + 1 sets
  EXPECT_EQ(as.size(), cs.size());

  td::store().reset_for_testing();
  tunable::set_rotating_buffer_size(0);
  Spy plain;
  plain.install("Test_Spy2");
  Problem q(64, 64, 65);
  q.run();
  EXPECT_LT(q.error(q.result()), 1e-5);
  std::set<const void*> qa;
  std::set<void*> qc;
  for (auto [a, c] : plain.tuning_runs(q.dc.get())) {
    qa.insert(a);
    qc.insert(c);
  }
  EXPECT_EQ(qa, (std::set<const void*>{q.da.get()}));  // the caller's A, in place
  EXPECT_EQ(qc.size(), 1u);                            // one scratch C
  EXPECT_FALSE(qc.count(q.dc.get()));
}

TEST_F(TunableTest, RecordsUntunedProblemsOnce) {
  REQUIRE_DEVICE();
  setenv("PYTORCH_TUNABLEOP_UNTUNED_FILENAME", (dir_ / "untuned.csv").c_str(), 1);
  td::settings_unchecked().reload_environment();
  unsetenv("PYTORCH_TUNABLEOP_UNTUNED_FILENAME");
  tunable::set_filename((dir_ / "res.csv").string());
  tunable::enable();
  tunable::tuning_enable(false);
  tunable::record_untuned_enable();
  Problem p(12, 10, 8), q(8, 8, 8);
  for (int i = 0; i < 3; ++i) {
    p.run();
    q.run();
  }
  EXPECT_LT(p.error(p.result()), 1e-5);
  EXPECT_TRUE(tunable::get_results().empty());
  const fs::path untuned = dir_ / ("untuned" + std::to_string(td::current_device_or_zero()) + ".csv");
  const std::string text = slurp(untuned);
  EXPECT_NE(text.find("GemmTunableOp_float_NN," + p.params() + "\n"), std::string::npos) << text;
  EXPECT_EQ(count_lines_starting(text, "GemmTunableOp_float_NN,"), 2) << text;
  EXPECT_FALSE(fs::exists(dir_ / "res.csv"));

  // Offline: tune that file (skipping what cudakit does not run), then the products are known.
  td::store().reset_for_testing();
  tunable::record_untuned_enable(false);
  tunable::tuning_enable(true);
  tunable::set_max_tuning_iterations(2);
  // A line that is no TunableOp line at all is an error naming it (torch skips it silently).
  spit(dir_ / "notes.csv", "Validator,PT_VERSION,2.11.0\nnot a gemm line\n");
  try {
    tunable::tune_gemm_in_file((dir_ / "notes.csv").string());
    ADD_FAILURE() << "a line that is not TunableOp's was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("notes.csv', line 2: not a TunableOp line"), std::string::npos)
        << e.what();
  }
  spit(untuned, text + "GemmStridedBatchedTunableOp_float_NN,nn_8_8_8_B_4_ld_8_8_8\n"
                       "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN,tn_16_16_16_ld_16_16_16_rw_0_bias_None\n");
  tunable::tune_gemm_in_file(untuned.string());
  auto r = tunable::get_results();
  ASSERT_EQ(r.size(), 3u);  // the two plain lines and the batched one; the scaled one skipped
  EXPECT_EQ(warnings().find("skips GemmStridedBatchedTunableOp"), std::string::npos) << warnings();
  EXPECT_NE(warnings().find("ScaledGemmTunableOp"), std::string::npos) << warnings();
  spit(dir_ / "bad.csv", "GemmTunableOp_float_NN,nn_1_1_1\nGemmTunableOp_float_NN,nn_one_1_1\n");
  try {
    tunable::tune_gemm_in_file((dir_ / "bad.csv").string());
    ADD_FAILURE() << "malformed line accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tunable::tune_gemm_in_file((dir_ / "missing.csv").string()), ValueError);
  tunable::enable(false);
  EXPECT_THROW(tunable::tune_gemm_in_file(untuned.string()), ValueError);
}

TEST_F(TunableTest, ForeignFilesAreRejectedAndNeverAppendedTo) {
  REQUIRE_DEVICE();
  const fs::path file = dir_ / "other.csv";
  const std::string other =
      "Validator,CUDAKIT_VERSION,0.0.0-elsewhere\n"
      "GemmTunableOp_float_NN,nn_2_2_2_ld_2_2_2,Default,0.1\n";
  spit(file, other);
  tunable::set_filename(file.string());
  tunable::enable();
  tunable::set_max_tuning_iterations(2);
  Problem p(16, 12, 8);
  p.run();
  EXPECT_NE(warnings().find("is rejected"), std::string::npos) << warnings();
  EXPECT_NE(warnings().find("not appended"), std::string::npos) << warnings();
  EXPECT_EQ(slurp(file), other);
  EXPECT_FALSE(tunable::read_file(file.string()));
  ASSERT_EQ(tunable::get_results().size(), 1u);
  // write_file replaces it with this process's results; appends continue after that.
  EXPECT_TRUE(tunable::write_file());
  EXPECT_TRUE(tunable::read_file());
  Problem q(8, 8, 24);
  q.run();
  EXPECT_EQ(count_lines_starting(slurp(file), "GemmTunableOp_"), 2);
  // Malformed files: read_file raises, naming the line.
  spit(dir_ / "bad.csv", "Validator,CUDAKIT_VERSION,0.1.0\nGemmTunableOp_float_NN\n");
  try {
    tunable::read_file((dir_ / "bad.csv").string());
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos);
  }
  EXPECT_FALSE(tunable::read_file((dir_ / "absent.csv").string()));
}

TEST_F(TunableTest, TorchFilesReadAndTorchFlavouredFilesWritten) {
  REQUIRE_DEVICE();
  Problem p(16, 16, 32);
  spit(dir_ / "torch.csv", std::string("Validator,PT_VERSION,2.11.0+cu130\n") +
                               "GemmTunableOp_float_NN," + p.params() + ",Default,0.004\n"
                               "GemmTunableOp_BFloat16_NT,nt_4096_4096_4096_ld_4096_4096_4096,"
                               "Gemm_Cublaslt_id_66_tile_37_stages_23_splitk_1_red_0_swizzle_0_"
                               "custom_0_inner_0_cluster_0,0.159\n");
  tunable::set_filename((dir_ / "mine.csv").string());
  tunable::enable();
  ASSERT_TRUE(tunable::read_file((dir_ / "torch.csv").string())) << warnings();
  EXPECT_EQ(tunable::get_results().size(), 2u);
  p.run();  // known (Default): nothing tuned
  EXPECT_LT(p.error(p.result()), 1e-5);
  EXPECT_EQ(tunable::get_results().size(), 2u);
  td::register_extra_candidate(td::ExtraCandidate{
      "Test_Local", nullptr, [](int device, detail::StreamHandle s, const detail::GemmArgs& g) {
        detail::backend().gemm(device, s, g);
      }});
  td::ResultsStore& st = td::store();
  st.add("GemmTunableOp_Half_NN", "nn_8_8_8_ld_8_8_8", td::ResultEntry{"Test_Local", 0.001});
  ASSERT_TRUE(tunable::write_file_for_torch((dir_ / "for_torch.csv").string(), "2.11.0+cu130"));
  const std::string text = slurp(dir_ / "for_torch.csv");
  EXPECT_EQ(text.rfind("Validator,PT_VERSION,2.11.0\n", 0), 0u) << text;
  EXPECT_EQ(count_lines_starting(text, "Validator,"), 1);
  EXPECT_EQ(count_lines_starting(text, "GemmTunableOp_"), 2);  // the local solution is left out
  EXPECT_NE(warnings().find("torch cannot build"), std::string::npos);
  td::store().reset_for_testing();
  EXPECT_TRUE(tunable::read_file((dir_ / "for_torch.csv").string()));
}

// Candidates with a slow first run (a lazily loaded cuBLASLt kernel's) are loaded only while that
// is cheaper than timing: for 3 runs of a tiny product, the first wave (two kernel families:
// every extra candidate is its own) spends the whole budget.
TEST_F(TunableTest, SlowLoadingCandidatesArePrunedByTheLoadingBudget) {
  REQUIRE_DEVICE();
  tunable::set_filename(""), tunable::enable(), tunable::set_max_tuning_iterations(3);
  std::vector<std::atomic<int>> runs(12);  // three waves' worth
  for (std::size_t i = 0; i < runs.size(); ++i)
    td::register_extra_candidate(td::ExtraCandidate{"Test_SlowLoad_" + std::to_string(i), nullptr,
        [&runs, i](int device, detail::StreamHandle s, const detail::GemmArgs& g) {
          if (runs[i]++ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
          detail::backend().gemm(device, s, g);
        }});
  Problem p(24, 20, 16);  // the first product tunes:
  p.run();
  EXPECT_TRUE(p.error(p.result()) < 1e-5 && tunable::get_results().size() == 1u);
  EXPECT_EQ(std::count_if(runs.begin(), runs.end(), [](auto& r) { return r.load() > 0; }), 2);
  td::clear_extra_candidates(); }  // before `runs` goes

TEST_F(TunableTest, NoTuningWhileCapturing) {
  REQUIRE_DEVICE();
  tunable::set_filename("");
  tunable::enable();
  tunable::set_max_tuning_iterations(2);
  Stream side;
  Problem p(24, 24, 24);
  {
    StreamGuard on(side);
    p.stream = side;
    CUDAGraph graph;
    graph.capture_begin();
    p.run();
    graph.capture_end();
    EXPECT_TRUE(tunable::get_results().empty());
    graph.replay();
    side.sync();
    EXPECT_LT(p.error(p.result()), 1e-5);
  }
  p.run();  // outside the capture: tuned now
  side.sync();
  EXPECT_EQ(tunable::get_results().size(), 1u);
}

TEST_F(TunableTest, ThreadsTuneAndRunConcurrently) {
  REQUIRE_DEVICE();
  tunable::set_filename((dir_ / "threads.csv").string());
  tunable::enable();
  tunable::set_max_tuning_iterations(2);
  tunable::set_rotating_buffer_size(0);
  constexpr int kThreads = 4;
  std::vector<double> errors(kThreads * 3);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Stream mine;
      StreamGuard on(mine);
      for (int i = 0; i < 3; ++i) {
        Problem p(16 + 8 * (i % 2), 16, 16 + 8 * i, static_cast<unsigned>(t * 10 + i));
        p.run();
        errors[static_cast<std::size_t>(t * 3 + i)] = p.error(p.result());
      }
    });
  }
  for (auto& th : threads) th.join();
  for (double e : errors) EXPECT_LT(e, 1e-5);
  EXPECT_EQ(tunable::get_results().size(), 3u);  // three distinct problems, each tuned once
  EXPECT_EQ(count_lines_starting(slurp(dir_ / "threads.csv"), "GemmTunableOp_"), 3);
}

TEST_F(TunableTest, GemmChecksItsArguments) {
  REQUIRE_DEVICE();
  Problem p(8, 8, 8);
  auto call = [&](char ta, std::int64_t m, std::int64_t lda, DType t, const void* a) {
    tunable::gemm(ta, 'N', m, 8, 8, 1.0, a, lda, p.db.get(), 8, 0.0, p.dc.get(), 8, t, p.stream);
  };
  auto expect_error = [&](auto fn, const std::string& text) {
    try {
      fn();
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_error([&] { call('X', 8, 8, DType::float32, p.da.get()); }, "argument 'transa' must be 'N' or 'T'");
  expect_error([&] { call('N', -1, 8, DType::float32, p.da.get()); }, "argument 'm' must be in [0, 2^31)");
  expect_error([&] { call('N', 8, 4, DType::float32, p.da.get()); }, "argument 'lda' must be at least 8");
  expect_error([&] { call('T', 8, 8, DType::int32, p.da.get()); }, "argument 'dtype' must be float16");
  expect_error([&] { call('N', 8, 8, DType::float32, nullptr); }, "null pointer");
  EXPECT_NO_THROW(call('n', 0, 1, DType::float32, nullptr));  // an empty product does nothing
}

}  // namespace
