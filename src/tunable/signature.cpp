#include "tunable/signature.hpp"

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace cudakit::tunable::detail {

using cudakit::detail::GemmArgs;
using cudakit::detail::GemmType;

const char* type_name(const GemmArgs& g) {
  switch (g.type) {
    case GemmType::float16: return "Half";
    case GemmType::bfloat16: return "BFloat16";
    case GemmType::float64: return "double";
    case GemmType::float32: break;
  }
  return g.allow_tf32 ? "tf32" : "float";
}

std::string op_signature(const GemmArgs& g) {
  std::string s = g.batch != 1 ? "GemmStridedBatchedTunableOp_" : "GemmTunableOp_";
  s += type_name(g);
  s += '_';
  s += g.transpose_a ? 'T' : 'N';
  s += g.transpose_b ? 'T' : 'N';
  return s;
}

std::string params_signature(const GemmArgs& g) {
  std::string s;
  s += g.transpose_a ? 't' : 'n';
  s += g.transpose_b ? 't' : 'n';
  for (int v : {g.m, g.n, g.k}) s += '_' + std::to_string(v);
  if (g.batch != 1) s += "_B_" + std::to_string(g.batch);
  s += "_ld";
  for (int v : {g.lda, g.ldb, g.ldc}) s += '_' + std::to_string(v);
  return s;
}

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

bool parse_dim(const std::string& s, std::int64_t& out, bool allow_zero) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  out = std::strtoll(s.c_str(), nullptr, 10);
  return out <= INT32_MAX && (allow_zero || out > 0);
}

constexpr const char* kPlainPrefix = "GemmTunableOp_";
constexpr const char* kBatchedPrefix = "GemmStridedBatchedTunableOp_";

}  // namespace

bool is_gemm_op(const std::string& op) {
  return op.rfind(kPlainPrefix, 0) == 0 || op.rfind(kBatchedPrefix, 0) == 0;
}

std::optional<ParsedGemm> parse_op(const std::string& op, std::string& why) {
  const bool batched = op.rfind(kBatchedPrefix, 0) == 0;
  if (!batched && op.rfind(kPlainPrefix, 0) != 0) {
    why = "'" + op + "' is neither a GemmTunableOp nor a GemmStridedBatchedTunableOp (cudakit "
          "tunes plain and strided batched GEMMs only)";
    return std::nullopt;
  }
  const std::string rest = op.substr(std::string(batched ? kBatchedPrefix : kPlainPrefix).size());
  const std::size_t us = rest.rfind('_');
  if (us == std::string::npos || rest.size() - us != 3) {
    why = "'" + op + "' does not end in _NN, _NT, _TN or _TT";
    return std::nullopt;
  }
  const std::string type = rest.substr(0, us), layout = rest.substr(us + 1);
  ParsedGemm p;
  p.batched = batched;
  if (type == "float") {
    p.type = GemmType::float32;
  } else if (type == "tf32") {
    p.type = GemmType::float32;
    p.allow_tf32 = true;
  } else if (type == "double") {
    p.type = GemmType::float64;
  } else if (type == "Half") {
    p.type = GemmType::float16;
  } else if (type == "BFloat16") {
    p.type = GemmType::bfloat16;
  } else {
    why = "'" + op + "': element type '" + type +
          "' is not one cudakit multiplies (float, tf32, double, Half, BFloat16)";
    return std::nullopt;
  }
  for (char c : layout) {
    if (c != 'N' && c != 'T') {
      why = "'" + op + "' does not end in _NN, _NT, _TN or _TT";
      return std::nullopt;
    }
  }
  p.transpose_a = layout[0] == 'T';
  p.transpose_b = layout[1] == 'T';
  return p;
}

bool parse_params(const std::string& params, ParsedGemm& into, std::string& why) {
  std::vector<std::string> f = split(params, '_');
  // "_B_<batch>" after k: a strided batch. Taken out here, so the rest reads like a plain
  // GEMM's params (both with and without the "_ld_" part).
  const bool has_batch = f.size() >= 6 && f[4] == "B";
  std::string batch_field;
  if (has_batch) {
    batch_field = f[5];
    f.erase(f.begin() + 4, f.begin() + 6);
  }
  const bool with_ld = f.size() == 8 && f[4] == "ld";
  if (!(with_ld || f.size() == 4) || f[0].size() != 2) {
    why = "params '" + params + "' are not <ta><tb>_<m>_<n>_<k>" +
          (into.batched ? "_B_<batch>" : "") + "[_ld_<lda>_<ldb>_<ldc>]";
    return false;
  }
  if (has_batch != into.batched) {
    why = "params '" + params + "' " +
          (has_batch ? "have a batch (_B_) but their op is a plain GemmTunableOp"
                     : "have no batch (_B_<batch>) but their op is a GemmStridedBatchedTunableOp");
    return false;
  }
  into.batch = 1;
  if (has_batch && !parse_dim(batch_field, into.batch, true)) {
    why = "params '" + params + "': the batch count must be a whole number below 2^31";
    return false;
  }
  const char ta = f[0][0], tb = f[0][1];
  auto trans_ok = [](char c) { return c == 'n' || c == 't' || c == 'N' || c == 'T'; };
  if (!trans_ok(ta) || !trans_ok(tb)) {
    why = "params '" + params + "' start with '" + f[0] + "', not nn, nt, tn or tt";
    return false;
  }
  if (((ta == 't' || ta == 'T') != into.transpose_a) || ((tb == 't' || tb == 'T') != into.transpose_b)) {
    why = "params '" + params + "' have other transposes than their op signature";
    return false;
  }
  // torch records empty products too (a zero m, n or k); they are valid signatures.
  if (!parse_dim(f[1], into.m, true) || !parse_dim(f[2], into.n, true) ||
      !parse_dim(f[3], into.k, true)) {
    why = "params '" + params + "': m, n and k must be whole numbers below 2^31";
    return false;
  }
  into.lda = into.ldb = into.ldc = 0;
  if (with_ld && (!parse_dim(f[5], into.lda, false) || !parse_dim(f[6], into.ldb, false) ||
                  !parse_dim(f[7], into.ldc, false))) {
    why = "params '" + params + "': leading dimensions must be positive whole numbers below 2^31";
    return false;
  }
  return true;
}

}  // namespace cudakit::tunable::detail
