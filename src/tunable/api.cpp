// include/cudakit/tunable.hpp: the public functions (argument checks, then the settings, the
// results store or the dispatcher).
#include <climits>
#include <cmath>

#include "backend/math_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/tunable.hpp"
#include "tunable/dispatch.hpp"
#include "tunable/results.hpp"
#include "tunable/settings.hpp"

namespace cudakit::tunable {
namespace {

using detail::settings;
using detail::store;

int non_negative(const char* fn, const char* arg, int value, const char* meaning) {
  if (value < 0) {
    throw ValueError(std::string(fn) + "(): argument '" + arg + "' must be >= 0 (" + meaning +
                     "), got " + std::to_string(value));
  }
  return value;
}

}  // namespace

void enable(bool value) { settings().set_enabled(value); }
bool is_enabled() { return settings().enabled(); }
void tuning_enable(bool value) { settings().set_tuning(value); }
bool tuning_is_enabled() { return settings().tuning(); }
void record_untuned_enable(bool value) { settings().set_record_untuned(value); }
bool record_untuned_is_enabled() { return settings().record_untuned(); }

void set_max_tuning_duration(int milliseconds) {
  settings().set_max_tuning_ms(non_negative("set_max_tuning_duration", "duration", milliseconds,
                                            "milliseconds per candidate; 0: no time bound"));
}
int get_max_tuning_duration() { return settings().max_tuning_ms(); }
void set_max_tuning_iterations(int iterations) {
  settings().set_max_tuning_iterations(non_negative("set_max_tuning_iterations", "iterations",
                                                    iterations, "0: no iteration bound"));
}
int get_max_tuning_iterations() { return settings().max_tuning_iterations(); }
void set_max_warmup_duration(int milliseconds) {
  settings().set_max_warmup_ms(non_negative("set_max_warmup_duration", "duration", milliseconds,
                                            "milliseconds; 0: no time bound"));
}
int get_max_warmup_duration() { return settings().max_warmup_ms(); }
void set_max_warmup_iterations(int iterations) {
  settings().set_max_warmup_iterations(non_negative("set_max_warmup_iterations", "iterations",
                                                    iterations, "0: no warm-up runs"));
}
int get_max_warmup_iterations() { return settings().max_warmup_iterations(); }

void set_filename(const std::string& filename, bool insert_device_ordinal) {
  if (filename.find_first_of("\n\r") != std::string::npos || filename.find('\0') != std::string::npos) {
    throw ValueError("set_filename(): argument 'filename' must be a file name without line "
                     "breaks or NUL characters, got '" + filename + "'");
  }
  settings().set_filename(filename, insert_device_ordinal,
                          insert_device_ordinal ? detail::current_device_or_zero() : 0);
  settings().bump_generation();
}
std::string get_filename() { return settings().filename(); }

std::vector<Result> get_results() {
  store().ensure_initialized();
  return store().results();
}

std::vector<std::pair<std::string, std::string>> get_validators() {
  store().ensure_initialized();
  const detail::ValidatorMap v = store().validators();
  return {v.begin(), v.end()};
}

bool read_file(const std::string& filename) {
  store().ensure_initialized();
  const std::string name = filename.empty() ? settings().filename() : filename;
  if (name.empty()) return false;
  return store().read_file(name, true);
}

bool write_file(const std::string& filename) {
  store().ensure_initialized();
  const std::string name = filename.empty() ? settings().filename() : filename;
  if (name.empty()) return false;
  return store().write_file(name);
}

bool write_file_for_torch(const std::string& filename, const std::string& torch_version) {
  if (filename.empty()) {
    throw ValueError("write_file_for_torch(): argument 'filename' must name a file, got ''");
  }
  if (torch_version.empty() || torch_version.find_first_of(",\n\r") != std::string::npos) {
    throw ValueError("write_file_for_torch(): argument 'torch_version' must be torch.__version__ "
                     "of the torch that reads the file (e.g. '2.11.0+cu130'), got '" +
                     torch_version + "'");
  }
  store().ensure_initialized();
  return store().write_file_for_torch(filename, torch_version);
}

void write_file_on_exit(bool value) { settings().set_write_on_exit(value); }

void set_rotating_buffer_size(int megabytes) { settings().set_rotating_mb(megabytes); }

std::int64_t get_rotating_buffer_size() {
  const int mb = settings().rotating_mb();
  if (mb == 0) return 0;
  if (mb > 0) return static_cast<std::int64_t>(mb) << 20;
  return get_device_properties(detail::current_device_or_zero()).L2_cache_size;
}

void set_numerical_check_tolerances(bool enable, double atol, double rtol) {
  for (auto [name, v] : {std::pair<const char*, double>{"atol", atol}, {"rtol", rtol}}) {
    if (!(v > 0) || !std::isfinite(v)) {
      throw ValueError(std::string("set_numerical_check_tolerances(): argument '") + name +
                       "' must be a positive finite number, got " + std::to_string(v));
    }
  }
  settings().set_numerical_check(NumericalCheck{enable, atol, rtol});
  settings().bump_generation();
}

NumericalCheck numerical_check() { return settings().numerical_check(); }

namespace {

// The checks gemm and gemm_strided_batched share: transposes, dtype, shape and leading
// dimensions; `fn` names the caller in the messages ("tunable::gemm").
cudakit::detail::GemmArgs checked_args(const char* fn, char transa, char transb, std::int64_t m,
                                       std::int64_t n, std::int64_t k, double alpha,
                                       std::int64_t lda, std::int64_t ldb, double beta,
                                       std::int64_t ldc, DType dtype, bool allow_tf32) {
  const std::string where = std::string(fn) + "(): argument '";
  auto trans = [&](char t, const char* arg) {
    if (t == 'n' || t == 'N') return false;
    if (t == 't' || t == 'T') return true;
    throw ValueError(where + arg + "' must be 'N' or 'T' (either case), got '" + std::string(1, t) + "'");
  };
  cudakit::detail::GemmArgs g;
  g.transpose_a = trans(transa, "transa");
  g.transpose_b = trans(transb, "transb");
  switch (dtype) {
    case DType::float16: g.type = cudakit::detail::GemmType::float16; break;
    case DType::bfloat16: g.type = cudakit::detail::GemmType::bfloat16; break;
    case DType::float32: g.type = cudakit::detail::GemmType::float32; break;
    case DType::float64: g.type = cudakit::detail::GemmType::float64; break;
    default:
      throw ValueError(where + "dtype' must be float16, bfloat16, float32 or float64, got " +
                       dtype_name(dtype));
  }
  auto dim = [&](std::int64_t v, const char* arg) {
    if (v < 0 || v > INT_MAX) {
      throw ValueError(where + arg + "' must be in [0, 2^31), got " + std::to_string(v));
    }
    return static_cast<int>(v);
  };
  g.m = dim(m, "m");
  g.n = dim(n, "n");
  g.k = dim(k, "k");
  const std::int64_t rows_a = g.transpose_a ? k : m, rows_b = g.transpose_b ? n : k;
  auto ld = [&](std::int64_t v, std::int64_t rows, const char* arg) {
    if (v < std::max<std::int64_t>(1, rows) || v > INT_MAX) {
      throw ValueError(where + arg + "' must be at least " +
                       std::to_string(std::max<std::int64_t>(1, rows)) +
                       " (the stored matrix's rows) and below 2^31, got " + std::to_string(v));
    }
    return static_cast<int>(v);
  };
  g.lda = ld(lda, rows_a, "lda");
  g.ldb = ld(ldb, rows_b, "ldb");
  g.ldc = ld(ldc, m, "ldc");
  g.alpha = alpha;
  g.beta = beta;
  g.allow_tf32 = allow_tf32;
  return g;
}

// Pointers checked last (after every argument that can be checked without them), then the
// product: nothing for an empty one, the backend's GEMM for k == 0 (C = beta C, nothing to
// tune), the dispatcher otherwise.
void run_checked(const char* fn, cudakit::detail::GemmArgs g, const void* a, const void* b,
                 void* c, StreamRef stream) {
  if (g.batch > 0 && g.m > 0 && g.n > 0 && (!c || (g.k > 0 && (!a || !b)))) {
    throw ValueError(std::string(fn) + "(): a, b and c must be device pointers (got a null pointer)");
  }
  g.a = a;
  g.b = b;
  g.c = c;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const int device = resolve_device(stream.device());
  if (g.k == 0) {
    cudakit::detail::math_ops().gemm(device, stream.handle(), std::move(g));
    return;
  }
  detail::gemm(device, stream.handle(), std::move(g));
}

}  // namespace

void gemm(char transa, char transb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const void* a, std::int64_t lda, const void* b, std::int64_t ldb, double beta, void* c,
          std::int64_t ldc, DType dtype, StreamRef stream, bool allow_tf32) {
  run_checked("tunable::gemm",
              checked_args("tunable::gemm", transa, transb, m, n, k, alpha, lda, ldb, beta, ldc,
                           dtype, allow_tf32),
              a, b, c, stream);
}

void gemm(char transa, char transb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const void* a, std::int64_t lda, const void* b, std::int64_t ldb, double beta, void* c,
          std::int64_t ldc, DType dtype) {
  gemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, dtype, current_stream());
}

void gemm_strided_batched(char transa, char transb, std::int64_t m, std::int64_t n,
                          std::int64_t k, double alpha, const void* a, std::int64_t lda,
                          std::int64_t stride_a, const void* b, std::int64_t ldb,
                          std::int64_t stride_b, double beta, void* c, std::int64_t ldc,
                          std::int64_t stride_c, std::int64_t batch_count, DType dtype,
                          StreamRef stream, bool allow_tf32) {
  constexpr const char* fn = "tunable::gemm_strided_batched";
  cudakit::detail::GemmArgs g =
      checked_args(fn, transa, transb, m, n, k, alpha, lda, ldb, beta, ldc, dtype, allow_tf32);
  const std::string where = std::string(fn) + "(): argument '";
  if (batch_count < 0 || batch_count > INT_MAX) {
    throw ValueError(where + "batch_count' must be in [0, 2^31) (the number of products), got " +
                     std::to_string(batch_count));
  }
  for (auto [v, arg] : {std::pair{stride_a, "stride_a"}, std::pair{stride_b, "stride_b"}}) {
    if (v < 0) {
      throw ValueError(where + arg + "' must be >= 0 (elements from one matrix to the next; 0 "
                       "uses the same matrix for every product), got " + std::to_string(v));
    }
  }
  // Every product writes its own C: a stride of 0 would have them all write one matrix at once
  // (a data race on the GPU). Other overlapping layouts are the caller's to avoid, as in cuBLAS:
  // a stride below one matrix's extent is not refused, since interleaved layouts (stride_c >= m,
  // ldc >= (batch_count - 1) * stride_c + m: the heads of an attention output) do not overlap.
  if (stride_c < 0 || (stride_c == 0 && batch_count > 1)) {
    throw ValueError(where + "stride_c' must be > 0 when batch_count > 1 (elements from one C "
                     "matrix to the next; the products must not write the same memory), got " +
                     std::to_string(stride_c));
  }
  g.batch = static_cast<int>(batch_count);
  g.stride_a = stride_a;
  g.stride_b = stride_b;
  g.stride_c = stride_c;
  run_checked(fn, std::move(g), a, b, c, stream);
}

void gemm_strided_batched(char transa, char transb, std::int64_t m, std::int64_t n,
                          std::int64_t k, double alpha, const void* a, std::int64_t lda,
                          std::int64_t stride_a, const void* b, std::int64_t ldb,
                          std::int64_t stride_b, double beta, void* c, std::int64_t ldc,
                          std::int64_t stride_c, std::int64_t batch_count, DType dtype) {
  gemm_strided_batched(transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta,
                       c, ldc, stride_c, batch_count, dtype, current_stream());
}

}  // namespace cudakit::tunable
