// TunableOp (seed: torch.cuda.tunable): GEMMs timed across every implementation the backend
// offers, the fastest remembered per problem, in memory and in a results file.
//
// When enabled, every matrix product cudakit runs (matmul, and tunable::gemm /
// gemm_strided_batched below on raw pointers) first looks its problem up: the operator
// signature ("GemmTunableOp_BFloat16_NN": element type and BLAS transposes) and the parameter
// signature ("nn_4096_16_4096_ld_4096_4096_4096": BLAS m, n, k and leading dimensions). A
// strided batch of products (matmul of N-D operands, gemm_strided_batched) has torch's batched
// signatures, "GemmStridedBatchedTunableOp_BFloat16_NN" and "nn_128_128_64_B_96_ld_128_64_128"
// (the batch count after k); the batch strides are not in the signature (torch's format), so
// batches that differ only in their strides share a result, and each runs the recorded
// solution rebuilt for its own strides. A batch of one product is a plain GEMM. A known problem runs the recorded solution
// at once. An unknown one is tuned when tuning is enabled (every candidate timed on the
// caller's stream, the fastest recorded and appended to the results file), recorded in the
// untuned file when record_untuned is enabled instead, and runs "Default" (the backend's own
// GEMM: cuBLAS on cuda, CBLAS on emulated) otherwise.
//
// Candidates: "Default"; on cuda every cuBLASLt heuristic algorithm (asked for many, under two
// workspace limits) and split-K variants of the best ones for problems that underfill the GPU;
// on emulated a few CPU loops (so the machinery runs in CI). Tuning times them on rotating
// copies of the operands (get_rotating_buffer_size(), the L2 size by default, so timings do
// not run from L2), first all of them briefly, then the few closest to the best for the full
// budget (get_max_tuning_duration / get_max_tuning_iterations per finalist), and can check
// each candidate's result against Default's first (set_numerical_check_tolerances).
//
// Results file (torch's CSV, read and written both ways): "Validator,<key>,<value>" lines,
// then "<op signature>,<params signature>,<solution>,<milliseconds>". Validators record what
// the solutions depend on (cudakit version, GPU architecture, cuBLAS / cuBLASLt versions); a
// file whose validators differ is rejected (read_file returns false and warns). A file
// written by torch (its validator is PT_VERSION) is accepted: its solutions are rebuilt for
// this process and any that cannot run here falls back to Default. The default file name is
// "tunableop_results<device>.csv" (the device ordinal is inserted before the extension, or
// at "%d"), fixed at first use.
//
// Environment (read once, at first use; each PYTORCH_TUNABLEOP_<X> also as
// CUDAKIT_TUNABLEOP_<X>, which wins when both are set; like torch's they take precedence over
// the setters): ENABLED=1, TUNING=0, RECORD_UNTUNED=1, FILENAME, UNTUNED_FILENAME,
// NUMERICAL_CHECK (0, 1 or "<atol>_<rtol>"), MAX_TUNING_DURATION_MS, MAX_TUNING_ITERATIONS,
// MAX_WARMUP_DURATION_MS, MAX_WARMUP_ITERATIONS, ROTATING_BUFFER_SIZE (MiB; negative: L2),
// CUBLASLT_ENABLED=0 (Default only), VERBOSE (1..3) and VERBOSE_FILENAME (out, err or a path).
// A malformed value raises ValueError naming the variable at first use.
//
// Errors: ValueError for bad arguments (naming the argument, the value and what is accepted)
// and for malformed results files given to read_file / tune_gemm_in_file (naming file and
// line); warnings (set_warning_handler) for files that are rejected or cannot be written.
//
// Thread-safety: every function may be called from any thread. The settings are process-wide.
// A tuned or recorded product costs one lookup in a per-thread cache (no lock, no allocation)
// on top of the GEMM; tuning itself is serialised process-wide so candidates are never timed
// against each other.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cudakit/export.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

namespace CUDAKIT_API cudakit {
namespace tunable {

// The big switch: products go through TunableOp when enabled (PYTORCH_TUNABLEOP_ENABLED=1
// forces it on).
void enable(bool value = true);
bool is_enabled();
// Tuning of unknown problems (default on; PYTORCH_TUNABLEOP_TUNING=0 forces it off).
void tuning_enable(bool value = true);
bool tuning_is_enabled();
// Recording of unknown problems in the untuned file when tuning is off, for offline tuning
// (tune_gemm_in_file). The file is PYTORCH_TUNABLEOP_UNTUNED_FILENAME (default
// "tunableop_untuned.csv") with the device ordinal inserted before the extension.
void record_untuned_enable(bool value = true);
bool record_untuned_is_enabled();

// Time / iteration budget per finalist (torch: per solution); the smaller bound wins, at
// least one iteration runs; 0 means "not set" (100 iterations). Defaults 30 ms, 100.
void set_max_tuning_duration(int milliseconds);
int get_max_tuning_duration();
void set_max_tuning_iterations(int iterations);
int get_max_tuning_iterations();
// Warm-up runs before timing each finalist (default 0 and 0: one warm-up run).
void set_max_warmup_duration(int milliseconds);
int get_max_warmup_duration();
void set_max_warmup_iterations(int iterations);
int get_max_warmup_iterations();

// Results file. insert_device_ordinal puts the current device's ordinal at "%d" or before
// the last '.'. "" until set or until first use resolves the default.
void set_filename(const std::string& filename, bool insert_device_ordinal = false);
std::string get_filename();

struct Result {
  std::string op_signature;      // "GemmTunableOp_BFloat16_NN"
  std::string params_signature;  // "nn_4096_16_4096_ld_4096_4096_4096"
  std::string solution;          // "Default", "Gemm_Cublaslt_id_...", ...
  double time_ms = 0;            // average time measured when tuned (0 when unknown)
};
// Every known result (read from files and tuned here), ordered by signatures.
std::vector<Result> get_results();
// The validators this process writes and accepts, (key, value) ordered by key.
std::vector<std::pair<std::string, std::string>> get_validators();
// Merges a results file ("" = get_filename()); existing entries win. false when the file
// cannot be opened or its validators do not match (with a warning); ValueError naming the
// line when it is malformed.
bool read_file(const std::string& filename = "");
// Writes every result ("" = get_filename()); false (and a warning) when it cannot.
bool write_file(const std::string& filename = "");
// Writes the results for torch.cuda.tunable.read_file: torch accepts only its own validator
// set, so the file carries "Validator,PT_VERSION,<torch_version>" (the reading torch's
// torch.__version__, cut to "major.minor.patch" as torch writes it: "2.11.0+cu130" gives
// "2.11.0") and only results whose solutions torch can build (Default and cuBLASLt
// configurations). cudakit reads such a file too. false (and a warning) when it cannot write.
bool write_file_for_torch(const std::string& filename, const std::string& torch_version);
// Results are appended to the results file as they are found; this also rewrites the whole
// file at exit when some could not be appended (default true).
void write_file_on_exit(bool value);

// Rotating buffer: timing runs cycle through copies of the operands totalling this many MiB
// (0: none, negative: the device's L2 size, the default). get_ returns bytes.
void set_rotating_buffer_size(int megabytes);
std::int64_t get_rotating_buffer_size();

// Numerical check: each candidate's result is compared with Default's (|x - ref| <= atol +
// rtol * |ref| everywhere) and a candidate that fails is never chosen. Off by default;
// tolerances must be > 0.
void set_numerical_check_tolerances(bool enable, double atol = 1e-5, double rtol = 1e-5);
struct NumericalCheck {
  bool enabled = false;
  double atol = 1e-5, rtol = 1e-5;
};
NumericalCheck numerical_check();

// Offline tuning: tunes every GEMM line of an untuned (or results) file on the current device
// (needs is_enabled() and tuning_is_enabled()): plain (GemmTunableOp) and strided batched
// (GemmStridedBatchedTunableOp, tuned with packed batches: each matrix right after the
// previous one, as torch.bmm's contiguous operands) lines. Lines cudakit cannot run
// (GemmAndBias, scaled, complex GEMMs) are skipped with a warning naming the op; malformed
// lines are a ValueError.
void tune_gemm_in_file(const std::string& filename);
// One line of such a file ("GemmTunableOp_Half_NT,nt_..."); false when it was skipped.
bool tune_gemm_line(const std::string& line);

// C = alpha * op(A) op(B) + beta * C on raw device pointers, column-major (BLAS): op(A) is
// m x k, op(B) is k x n, C is m x n. transa / transb: 'N' or 'T' (either case). dtype:
// float16, bfloat16, float32, float64 (float16 / bfloat16 accumulate in float32;
// allow_tf32 lets float32 use TF32 tensor cores). Ordered on `stream`: a, b, c are memory of
// the stream's device and must stay allocated until the stream has run the product, as with
// any asynchronous CUDA call. Tuned like matmul when TunableOp is enabled, the backend's GEMM
// otherwise; tuning never writes c except with the final result.
void gemm(char transa, char transb, std::int64_t m, std::int64_t n, std::int64_t k,
          double alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb,
          double beta, void* c, std::int64_t ldc, DType dtype, StreamRef stream,
          bool allow_tf32 = false);
// The same on the current stream of the current device.
void gemm(char transa, char transb, std::int64_t m, std::int64_t n, std::int64_t k,
          double alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb,
          double beta, void* c, std::int64_t ldc, DType dtype);

// batch_count products C_i = alpha * op(A_i) op(B_i) + beta * C_i on raw device pointers, as
// cublasGemmStridedBatchedEx (torch's at::cuda::blas::bgemm): X_i = x + i * stride_x, strides
// in elements; each product has gemm's conventions above (column-major, transposes, dtype,
// leading dimensions, stream order, tuning). stride_a / stride_b >= 0, where 0 uses one matrix
// for every product (a broadcast operand); stride_c > 0 when batch_count > 1 (products must not
// write the same C; overlapping C layouts are undefined, as in cuBLAS). batch_count in [0,
// 2^31): 0 does nothing, 1 is gemm (its plain signature). ValueError naming the argument for
// anything else.
void gemm_strided_batched(char transa, char transb, std::int64_t m, std::int64_t n,
                          std::int64_t k, double alpha, const void* a, std::int64_t lda,
                          std::int64_t stride_a, const void* b, std::int64_t ldb,
                          std::int64_t stride_b, double beta, void* c, std::int64_t ldc,
                          std::int64_t stride_c, std::int64_t batch_count, DType dtype,
                          StreamRef stream, bool allow_tf32 = false);
// The same on the current stream of the current device.
void gemm_strided_batched(char transa, char transb, std::int64_t m, std::int64_t n,
                          std::int64_t k, double alpha, const void* a, std::int64_t lda,
                          std::int64_t stride_a, const void* b, std::int64_t ldb,
                          std::int64_t stride_b, double beta, void* c, std::int64_t ldc,
                          std::int64_t stride_c, std::int64_t batch_count, DType dtype);

// Where TunableOp's warnings go (default, or an empty handler: stderr). Called on the thread
// that triggered the warning, outside every TunableOp lock.
void set_warning_handler(std::function<void(const std::string& message)> handler);

}  // namespace tunable
}  // namespace cudakit
