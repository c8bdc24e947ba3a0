// Emulated backend: the GEMM tuning candidates (Backend::gemm_candidates / gemm_plan).
//
// The emulated Default is CBLAS (math.cpp). Its candidates are plain loops over dense float32
// (float64 for float64) copies of op(A) and op(B), blocked in three sizes, named
// "Gemm_Emulated_Blocked_<mb>x<nb>x<kb>", plus the unblocked loop "Gemm_Emulated_Loop". They
// are slower than OpenBLAS on purpose: they exist so that the tuning machinery (timing,
// selection, results files, numerical check, rotating buffers) runs in CI with several real
// implementations that compute the same product in different orders. Like every emulated
// device op, a plan runs as a host task on the stream ("ck_gemm_tuned" when captured) and keeps
// GemmArgs::keep_alive until it ran.
//
// Validators: the BLAS the Default runs on (its identity decides the timing a results file
// records).
#include <algorithm>
#include <cstdio>
#include <string>

#if defined(CUDAKIT_HAVE_CBLAS)
#include <cblas.h>
#endif

#include "backend/emulated/gemm_host.hpp"
#include "backend/emulated/state.hpp"

namespace cudakit::detail::emulated {
namespace {

struct Blocking {
  int mb, nb, kb;  // 0: no blocking (the plain loop)
};
constexpr Blocking kBlockings[] = {{32, 32, 64}, {64, 16, 128}, {16, 64, 256}};

std::string plan_name(const Blocking& b) {
  if (b.mb == 0) return "Gemm_Emulated_Loop";
  return "Gemm_Emulated_Blocked_" + std::to_string(b.mb) + "x" + std::to_string(b.nb) + "x" +
         std::to_string(b.kb);
}

// Dense op(X) in the accumulation type: rows x cols column-major.
template <class Acc>
std::vector<Acc> dense(const GemmArgs& g, const Stored& s, bool transpose, int rows, int cols) {
  std::vector<Acc> stored;
  if constexpr (std::is_same_v<Acc, double>) {
    stored.resize(static_cast<std::size_t>(s.rows) * s.cols);
    const double* src = static_cast<const double*>(s.p);
    for (int c = 0; c < s.cols; ++c)
      for (int r = 0; r < s.rows; ++r)
        stored[static_cast<std::size_t>(c) * s.rows + r] = src[static_cast<std::size_t>(c) * s.ld + r];
  } else if (g.type == GemmType::float32 && !g.allow_tf32) {
    stored = widen<float>(s, [](float f) { return f; });
  } else {
    stored = widen_any(g, s);
  }
  if (!transpose) return stored;
  std::vector<Acc> out(static_cast<std::size_t>(rows) * cols);
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; ++r)
      out[static_cast<std::size_t>(c) * rows + r] = stored[static_cast<std::size_t>(r) * s.rows + c];
  return out;
}

template <class Acc>
void blocked_product(const GemmArgs& g, const Blocking& b, std::vector<Acc>& acc) {
  const int m = g.m, n = g.n, k = g.k;
  const std::vector<Acc> a = dense<Acc>(g, stored_a(g), g.transpose_a, m, k);
  const std::vector<Acc> bm = dense<Acc>(g, stored_b(g), g.transpose_b, k, n);
  acc.assign(static_cast<std::size_t>(m) * n, Acc(0));
  const int mb = b.mb ? b.mb : m, nb = b.nb ? b.nb : n, kb = b.kb ? b.kb : k;
  for (int j0 = 0; j0 < n; j0 += nb)
    for (int p0 = 0; p0 < k; p0 += kb)
      for (int i0 = 0; i0 < m; i0 += mb) {
        const int j1 = std::min(n, j0 + nb), p1 = std::min(k, p0 + kb), i1 = std::min(m, i0 + mb);
        for (int j = j0; j < j1; ++j)
          for (int p = p0; p < p1; ++p) {
            const Acc bv = bm[static_cast<std::size_t>(j) * k + p];
            const Acc* ac = &a[static_cast<std::size_t>(p) * m];
            Acc* cc = &acc[static_cast<std::size_t>(j) * m];
            for (int i = i0; i < i1; ++i) cc[i] += ac[i] * bv;
          }
      }
}

template <class T, class Acc, class ToAcc, class FromAcc>
void store(const GemmArgs& g, const std::vector<Acc>& acc, ToAcc to_acc, FromAcc from_acc) {
  T* c = static_cast<T*>(g.c);
  const Acc alpha = static_cast<Acc>(g.alpha), beta = static_cast<Acc>(g.beta);
  for (int j = 0; j < g.n; ++j)
    for (int i = 0; i < g.m; ++i) {
      T& out = c[static_cast<std::size_t>(j) * g.ldc + i];
      Acc v = alpha * acc[static_cast<std::size_t>(j) * g.m + i];
      if (beta != Acc(0)) v += beta * to_acc(out);  // beta == 0 never reads C (BLAS)
      out = from_acc(v);
    }
}

void run_blocked_one(const GemmArgs& g, const Blocking& b) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {  // the same empty-sum rule as the Default
    run_gemm(g);
    return;
  }
  if (g.type == GemmType::float64) {
    std::vector<double> acc;
    blocked_product(g, b, acc);
    store<double>(g, acc, [](double v) { return v; }, [](double v) { return v; });
    return;
  }
  std::vector<float> acc;
  blocked_product(g, b, acc);
  switch (g.type) {
    case GemmType::float32:
      store<float>(g, acc, [](float v) { return v; }, [](float v) { return v; });
      break;
    case GemmType::float16:
      store<ops::Half>(g, acc, [](ops::Half v) { return v.to_float(); },
                       [](float v) { return ops::Half::from_float(v); });
      break;
    case GemmType::bfloat16:
      store<ops::BFloat16>(g, acc, [](ops::BFloat16 v) { return v.to_float(); },
                           [](float v) { return ops::BFloat16::from_float(v); });
      break;
    case GemmType::float64: break;
  }
}

// A strided batch: the same loop once per product (batch_item), in order.
void run_blocked(const GemmArgs& g, const Blocking& b) {
  if (g.batch == 1) {
    run_blocked_one(g, b);
    return;
  }
  for (int i = 0; i < g.batch; ++i) run_blocked_one(batch_item(g, i), b);
}

class HostLoopPlan final : public GemmPlan {
 public:
  HostLoopPlan(EmulatedBackend& backend, Blocking b) : backend_(backend), b_(b), name_(plan_name(b)) {}
  const std::string& name() const noexcept override { return name_; }
  std::size_t workspace_bytes() const noexcept override { return 0; }
  void run(StreamHandle s, const GemmArgs& args, void*) const override {
    backend_.launch_host_kernel(s, "ck_gemm_tuned", [g = args, b = b_] { run_blocked(g, b); });
  }

 private:
  EmulatedBackend& backend_;
  Blocking b_;
  std::string name_;
};

}  // namespace

std::vector<GemmPlanPtr> EmulatedBackend::gemm_candidates(int device, const GemmArgs& problem) {
  dev(device);
  std::vector<GemmPlanPtr> out;
  for (const Blocking& b : kBlockings) out.push_back(std::make_shared<HostLoopPlan>(*this, b));
  out.push_back(std::make_shared<HostLoopPlan>(*this, Blocking{0, 0, 0}));
  return out;
}

GemmPlanPtr EmulatedBackend::gemm_plan(int device, const GemmArgs& problem,
                                       const std::string& name) {
  dev(device);
  if (name == plan_name(Blocking{0, 0, 0})) {
    return std::make_shared<HostLoopPlan>(*this, Blocking{0, 0, 0});
  }
  // Any positive blocking is a valid loop, also ones this version does not offer (a file
  // written by another cudakit version stays usable).
  int mb = 0, nb = 0, kb = 0, used = 0;
  if (std::sscanf(name.c_str(), "Gemm_Emulated_Blocked_%dx%dx%d%n", &mb, &nb, &kb, &used) == 3 &&
      used == static_cast<int>(name.size()) && mb > 0 && nb > 0 && kb > 0 &&
      name == plan_name(Blocking{mb, nb, kb})) {
    return std::make_shared<HostLoopPlan>(*this, Blocking{mb, nb, kb});
  }
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> EmulatedBackend::gemm_tuning_validators(
    int) noexcept {
  std::vector<std::pair<std::string, std::string>> out;
  try {
#if defined(CUDAKIT_HAVE_CBLAS) && defined(OPENBLAS_VERSION)
    const char* config = openblas_get_config();
    out.emplace_back("EMULATED_BLAS", config ? config : "OpenBLAS");
#elif defined(CUDAKIT_HAVE_CBLAS)
    out.emplace_back("EMULATED_BLAS", "CBLAS");
#else
    out.emplace_back("EMULATED_BLAS", "loop");
#endif
  } catch (...) {
  }
  return out;
}

}  // namespace cudakit::detail::emulated
