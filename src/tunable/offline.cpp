// Offline tuning (torch.cuda.tunable.tune_gemm_in_file): every GEMM line of an untuned (or
// results) file is run once on random operands of its exact shape and leading dimensions,
// through the dispatcher, so it is tuned and recorded like a product of the workload.
//
// Lines are BLAS-level signatures, so the operands are built from m, n, k, lda, ldb, ldc
// directly (torch rebuilds torch.mm arguments instead, and cannot tune some shapes that way).
// Operands are random in [0, 1), as torch.rand, generated on the host and copied over.
//
// Strided batched lines (GemmStridedBatchedTunableOp, "_B_<batch>") name no strides, so the
// batch is packed: each matrix follows the previous one directly, stride = leading dimension
// x columns of the stored matrix (what torch.bmm on contiguous tensors passes). A product
// whose strides differ (a broadcast operand, padding between matrices) shares the line's
// signature, so it finds this result; its plan is rebuilt for its own strides when it runs.
// A batch of 1 is tuned as the plain GEMM it is (tunable/signature.hpp).
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "backend/math_ops.hpp"
#include "backend/memory_ops.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/tunable.hpp"
#include "kernels/numeric.hpp"
#include "tunable/dispatch.hpp"
#include "tunable/results_file.hpp"
#include "tunable/settings.hpp"
#include "tunable/signature.hpp"
#include "tunable/tuner.hpp"

namespace cudakit::tunable {
namespace {

using cudakit::detail::GemmType;

void require_tuning(const char* fn) {
  if (!detail::settings().enabled()) {
    throw ValueError(std::string(fn) + "(): TunableOp is not enabled (call enable() or set "
                                       "PYTORCH_TUNABLEOP_ENABLED=1)");
  }
  if (!detail::settings().tuning()) {
    throw ValueError(std::string(fn) + "(): tuning is not enabled (call tuning_enable(); "
                                       "PYTORCH_TUNABLEOP_TUNING=0 forbids it)");
  }
}

std::vector<unsigned char> random_operand(std::size_t bytes, GemmType t, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<unsigned char> out(bytes);
  switch (t) {
    case GemmType::float64:
      for (std::size_t i = 0; i + 8 <= bytes; i += 8) {
        const double v = u(rng);
        std::memcpy(out.data() + i, &v, 8);
      }
      break;
    case GemmType::float32:
      for (std::size_t i = 0; i + 4 <= bytes; i += 4) {
        const float v = u(rng);
        std::memcpy(out.data() + i, &v, 4);
      }
      break;
    case GemmType::float16:
      for (std::size_t i = 0; i + 2 <= bytes; i += 2) {
        const ops::Half v = ops::Half::from_float(u(rng));
        std::memcpy(out.data() + i, &v, 2);
      }
      break;
    case GemmType::bfloat16:
      for (std::size_t i = 0; i + 2 <= bytes; i += 2) {
        const ops::BFloat16 v = ops::BFloat16::from_float(u(rng));
        std::memcpy(out.data() + i, &v, 2);
      }
      break;
  }
  return out;
}

}  // namespace

bool tune_gemm_line(const std::string& raw) {
  require_tuning("tune_gemm_line");
  std::string line = raw;
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
  const std::size_t c1 = line.find(',');
  if (c1 == std::string::npos) {
    throw ValueError("tune_gemm_line(): '" + line + "' is not '<op signature>,<params signature>[,...]'");
  }
  const std::size_t c2 = line.find(',', c1 + 1);
  const std::string op = line.substr(0, c1);
  const std::string params = line.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
  std::string why;
  std::optional<detail::ParsedGemm> p = detail::parse_op(op, why);
  if (!p) {
    detail::warn("offline tuning skips " + op + "," + params + ": " + why);
    return false;
  }
  if (!detail::parse_params(params, *p, why)) throw ValueError("tune_gemm_line(): " + why);
  if (p->m == 0 || p->n == 0 || p->k == 0 || p->batch == 0) return false;  // empty: nothing to tune

  cudakit::detail::GemmArgs g;
  g.type = p->type;
  g.allow_tf32 = p->allow_tf32;
  g.transpose_a = p->transpose_a;
  g.transpose_b = p->transpose_b;
  g.m = static_cast<int>(p->m);
  g.n = static_cast<int>(p->n);
  g.k = static_cast<int>(p->k);
  const std::int64_t rows_a = g.transpose_a ? p->k : p->m, cols_a = g.transpose_a ? p->m : p->k;
  const std::int64_t rows_b = g.transpose_b ? p->n : p->k, cols_b = g.transpose_b ? p->k : p->n;
  g.lda = static_cast<int>(p->lda ? p->lda : rows_a);
  g.ldb = static_cast<int>(p->ldb ? p->ldb : rows_b);
  g.ldc = static_cast<int>(p->ldc ? p->ldc : p->m);
  if (g.lda < rows_a || g.ldb < rows_b || g.ldc < p->m) {
    throw ValueError("tune_gemm_line(): params '" + params +
                     "' have a leading dimension smaller than its matrix's rows");
  }
  g.batch = static_cast<int>(p->batch);
  if (g.batch != 1) {  // packed: the line names no strides (see the top of this file)
    g.stride_a = static_cast<std::int64_t>(g.lda) * cols_a;
    g.stride_b = static_cast<std::int64_t>(g.ldb) * cols_b;
    g.stride_c = static_cast<std::int64_t>(g.ldc) * p->n;
  }
  const std::size_t elem = g.type == GemmType::float64 ? 8 : g.type == GemmType::float32 ? 4 : 2;
  const std::size_t a_bytes = detail::batch_operand_bytes(rows_a, cols_a, g.lda, g.stride_a, g.batch, elem);
  const std::size_t b_bytes = detail::batch_operand_bytes(rows_b, cols_b, g.ldb, g.stride_b, g.batch, elem);
  const std::size_t c_bytes = detail::batch_operand_bytes(p->m, p->n, g.ldc, g.stride_c, g.batch, elem);

  const int device = current_device();
  const StreamRef stream = current_stream(device);
  Allocation a = allocate_device(a_bytes, device, stream);
  Allocation b = allocate_device(b_bytes, device, stream);
  Allocation c = allocate_device(c_bytes, device, stream);
  std::mt19937 rng(0x7u);
  const std::vector<unsigned char> ha = random_operand(a_bytes, g.type, rng);
  const std::vector<unsigned char> hb = random_operand(b_bytes, g.type, rng);
  auto& be = cudakit::detail::memory_ops();
  be.memcpy_async(a.get(), ha.data(), a_bytes, stream.handle());
  be.memcpy_async(b.get(), hb.data(), b_bytes, stream.handle());
  be.memset_d8_async(c.get(), 0, c_bytes, stream.handle());
  stream.sync();  // the host operands must outlive their copies, whatever happens next
  g.a = a.get();
  g.b = b.get();
  g.c = c.get();
  detail::gemm(device, stream.handle(), g);
  stream.sync();  // tuned and recorded before a, b, c return to the allocator
  return true;
}

void tune_gemm_in_file(const std::string& filename) {
  require_tuning("tune_gemm_in_file");
  errno = 0;
  std::ifstream in(filename, std::ios::binary);
  if (!in) {
    throw ValueError("tune_gemm_in_file(): cannot open '" + filename + "': " +
                     (errno != 0 ? std::strerror(errno) : "unknown error"));
  }
  std::string line;
  int number = 0, gemms = 0;
  auto where = [&] { return "tune_gemm_in_file(): '" + filename + "', line " + std::to_string(number) + ": "; };
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (std::optional<std::string> why = detail::not_text(line)) {
      throw ValueError(where() + *why + ": an untuned or results file is TunableOp's CSV text "
                                        "(is this the right file?)");
    }
    if (line.find_first_not_of(" \t") == std::string::npos || line.rfind("Validator,", 0) == 0) continue;
    // torch tunes the Gemm* and ScaledGemm* lines and skips the rest without a word; any other
    // line is not TunableOp's (a wrong file, or a damaged one), and says so. Of the Gemm* lines,
    // tune_gemm_line runs the plain and strided batched ones and skips the others (GemmAndBias,
    // scaled, complex) with a warning naming the op.
    if (line.rfind("Gemm", 0) != 0 && line.rfind("ScaledGemm", 0) != 0) {
      throw ValueError(where() + "not a TunableOp line: expected '<op signature>,<params "
                                 "signature>[,...]' with a GemmTunableOp_ or ScaledGemmTunableOp_ "
                                 "op, or a Validator line (the line: '" +
                       detail::quoted_line(line) + "')");
    }
    ++gemms;
    try {
      tune_gemm_line(line);
    } catch (const ValueError& e) {
      throw ValueError(where() + e.what());
    }
  }
  if (gemms == 0) {
    detail::warn("tune_gemm_in_file(): '" + filename + "' has no GEMM lines (" +
                 std::to_string(number) + " lines read): nothing was tuned");
  }
}

}  // namespace cudakit::tunable
