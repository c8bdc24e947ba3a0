// GEMM problem identities: the signatures torch writes in results files, and the compact key
// the dispatch cache uses. Internal header.
//
// Signatures (torch's GemmTunableOp, BLAS terms: C = op(A) op(B), column-major):
//   op:     "GemmTunableOp_<type>_<TA><TB>"   type: float, tf32 (float32 with TF32 allowed),
//           double, Half, BFloat16; TA/TB: N or T
//   params: "<ta><tb>_<m>_<n>_<k>_ld_<lda>_<ldb>_<ldc>"   (lower-case transposes)
// torch.mm(a, b) on row-major tensors is the BLAS product b^T a^T, so a product run by
// cudakit.matmul and by torch.mm on the same tensors have the same signatures. Older torch
// wrote params without the "_ld_..." part; parse_params accepts both.
//
// Strided batches (GemmArgs::batch > 1; torch's GemmStridedBatchedTunableOp, torch.bmm):
//   op:     "GemmStridedBatchedTunableOp_<type>_<TA><TB>"   (types as above)
//   params: "<ta><tb>_<m>_<n>_<k>_B_<batch>_ld_<lda>_<ldb>_<ldc>"   (older torch: no "_ld_...")
// The batch strides are not part of torch's signatures, so problems that differ only in their
// strides share one results-file entry; the dispatch key (GemmKey) keeps them apart, since a
// plan is bound to its strides. A batch of 1 is a plain GEMM to cudakit: it has the plain
// signatures (torch.bmm of one matrix pair records a "_B_1" line, which cudakit reads and tunes
// as that plain GEMM).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "backend/math_ops.hpp"

namespace cudakit::tunable::detail {

std::string op_signature(const cudakit::detail::GemmArgs& g);
std::string params_signature(const cudakit::detail::GemmArgs& g);

// torch's element type name of a GEMM ("tf32" for float32 with allow_tf32).
const char* type_name(const cudakit::detail::GemmArgs& g);

// A GEMM problem parsed back from its signatures.
struct ParsedGemm {
  cudakit::detail::GemmType type = cudakit::detail::GemmType::float32;
  bool allow_tf32 = false;
  bool transpose_a = false, transpose_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;  // 0 when the params carried none
  bool batched = false;                    // a GemmStridedBatchedTunableOp
  std::int64_t batch = 1;                  // from "_B_<batch>" (batched ops only)
};

// The op signature's parts: nullopt (with `why`) when it is neither a GemmTunableOp nor a
// GemmStridedBatchedTunableOp of a type cudakit runs (scaled, complex, GemmAndBias, ...).
std::optional<ParsedGemm> parse_op(const std::string& op, std::string& why);
// Fills shape, batch and leading dimensions from params; false (with `why`) when malformed,
// when its transposes disagree with the op's, or when it has a batch and the op has none (or
// the other way round).
bool parse_params(const std::string& params, ParsedGemm& into, std::string& why);
// Whether `op` starts like a GEMM op cudakit parses (plain or strided batched), whatever its
// type: the lines results files validate strictly.
bool is_gemm_op(const std::string& op);

// The dispatch cache's key: everything a plan depends on, the batch and its strides included
// (strides zeroed for a single product, which ignores them). Trivially copyable and compared
// bytewise (constructed zeroed, so padding never differs; the layout below has none: 64
// bytes).
struct GemmKey {
  std::int32_t device;
  std::int32_t m, n, k, lda, ldb, ldc;
  std::int32_t batch;
  std::int64_t stride_a, stride_b, stride_c;
  std::uint16_t align_a, align_b, align_c;
  std::uint8_t type;
  std::uint8_t flags;  // bit 0: transpose_a, 1: transpose_b, 2: allow_tf32

  static GemmKey of(int device, const cudakit::detail::GemmArgs& g) noexcept {
    GemmKey key;
    std::memset(&key, 0, sizeof key);
    key.device = device;
    key.m = g.m;
    key.n = g.n;
    key.k = g.k;
    key.lda = g.lda;
    key.ldb = g.ldb;
    key.ldc = g.ldc;
    key.batch = g.batch;
    if (g.batch != 1) {
      key.stride_a = g.stride_a;
      key.stride_b = g.stride_b;
      key.stride_c = g.stride_c;
    }
    key.align_a = static_cast<std::uint16_t>(cudakit::detail::pointer_alignment(g.a));
    key.align_b = static_cast<std::uint16_t>(cudakit::detail::pointer_alignment(g.b));
    key.align_c = static_cast<std::uint16_t>(cudakit::detail::pointer_alignment(g.c));
    key.type = static_cast<std::uint8_t>(g.type);
    key.flags = static_cast<std::uint8_t>((g.transpose_a ? 1 : 0) | (g.transpose_b ? 2 : 0) |
                                          (g.allow_tf32 && g.type == cudakit::detail::GemmType::float32 ? 4 : 0));
    return key;
  }
  bool operator==(const GemmKey& o) const noexcept { return std::memcmp(this, &o, sizeof o) == 0; }
  std::size_t hash() const noexcept {
    // Eight 64-bit words, one multiply each, then a final mix (the dispatch cache takes the
    // hash modulo a small table, so the low bits must depend on every word). Byte-wise FNV-1a
    // was a chain of 64 dependent multiplies (~250 cycles) on every tuned product.
    std::uint64_t h = 0x9E3779B97F4A7C15ull;
    for (std::size_t i = 0; i < sizeof(GemmKey); i += sizeof(std::uint64_t)) {
      std::uint64_t w;
      std::memcpy(&w, reinterpret_cast<const unsigned char*>(this) + i, sizeof w);
      h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    }
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return static_cast<std::size_t>(h);
  }
};
static_assert(sizeof(GemmKey) == 64, "GemmKey has padding: bytewise comparison needs none");
static_assert(sizeof(GemmKey) % sizeof(std::uint64_t) == 0, "hash() reads whole 64-bit words");

}  // namespace cudakit::tunable::detail
