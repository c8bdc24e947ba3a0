// Finds the fastest implementation of one GEMM problem (torch's TunableOp::FindFastest, made
// cheaper so that more candidates fit in the same time). Internal header.
//
// On the caller's stream, after the work already queued there:
// A strided batch is tuned as one problem (GemmArgs::batch, the strides): the copies below span
// every matrix of each operand, and the numerical check compares every product of the batch.
//
//   1. Operands: the caller's C is never written. Timing runs on copies: one set {A, B, C}
//      when the rotating buffer is off (the caller's A and B, a scratch C); otherwise as many
//      copies of {A, B, C} as fill the rotating size (+1, as torch), carved from one allocation
//      and filled by doubling copies (a few memcpys even for tiny problems, where torch makes
//      thousands of separate copies), cycled through across every timed run so no run reads
//      its operands from L2.
//   2. Numerical check (when enabled): Default's result is the reference; each other candidate
//      runs once on a fresh copy of C and is dropped unless every element is within
//      atol + rtol * |reference| (NaN never matches, as torch.allclose).
//   3. Probe: Default runs once untimed and kProbeIterations times timed (synchronised), which
//      sizes the kernel-loading budget (tuner.cpp, kLoadThreads): the other candidates' first
//      runs (each loads its kernel) go in waves over threads, in the backend's order of
//      promise and counted in kernel families (loading.hpp), until the loading has taken as
//      long as the finals are expected to; the rest are not tried, except the candidates of
//      families already loaded. Then every loaded candidate runs once untimed (a failure at launch drops
//      it) and kProbeIterations times between two events. All candidates are queued back to
//      back and synchronised once, so probing costs the GPU time of the runs and no host round
//      trip per candidate.
//   4. Finals: Default, and the candidates within kFinalistRatio of the best probe (at most
//      kFinalists in all) share kFinalsBudget times torch's per-solution budget
//      (get_max_tuning_duration / iterations, warm-up settings; at least
//      kMinFinalIterations runs each), split into kFinalRounds + 1 rounds: one untimed
//      warm-up round, then kFinalRounds timed rounds of alternating order (A B C D, D C B A,
//      ...) so clock drift favours none of them; a finalist's time is the median of its
//      rounds' averages. The lowest wins, but replaces Default only when it is faster by more
//      than kDefaultMargin (so that timing noise does not make a tuned GEMM slower than the
//      untuned one).
// Torch times every candidate for the full budget; here kFinalsBudget candidates' budget is
// spent whatever their number, so that cudakit can try every cuBLASLt heuristic answer and
// split-K variants. Measured on the H200: four full budgets took 2-7x torch 2.11's tuning
// time; two budgets shared (71d2c92) about torch's time on the large shapes (1.0-1.1x) and
// 2.6-5x on the small ones, whose probes are dominated by host time (see the verbose log's
// per-phase times and each candidate's first-run host time).
//
// Tuning is serialised process-wide (a mutex) so two threads never time against each other.
//
// Thread-safety: find_fastest may be called from any thread (serialised, see above).
#pragma once

#include <mutex>
#include <optional>

#include "backend/math_ops.hpp"

namespace cudakit::tunable::detail {

inline constexpr int kProbeIterations = 2;
inline constexpr int kFinalists = 4;
inline constexpr double kFinalistRatio = 1.25;
// One solution's budget for all the finalists together. H200 at 71d2c92 with 2: finals took
// 37 / 144 / 207 ms of the 51 / 170 / 251 ms tuning of bf16 4096^3 / 4096x14336x4096 / 8192^3
// (torch 2.11: 48 / 154 / 250 ms for timing Default alone), with finalists within 2.5% of each
// other and the two rounds within 1% of each other: half the runs still separate them.
inline constexpr int kFinalsBudget = 1;
inline constexpr int kMinFinalIterations = 12;
inline constexpr int kFinalRounds = 4;
// H200, bf16 4096^3: with a 1% margin a cuBLASLt plan won the finals and then ran 2.7%
// slower than Default in steady state. 8192^3, three runs: Default was timed 1.68-1.73 ms in
// the finals against 1.61-1.63 ms in steady state (the cause is not known), so plans 3.3%
// faster in the finals won and then ran 0-1% slower than Default. The wins that matter are
// far larger (1.2-2.7x on 16x4096x4096, 20% in its finals).
inline constexpr double kDefaultMargin = 0.05;

struct TuneOutcome {
  cudakit::detail::GemmPlanPtr plan;
  double time_ms = 0;
  int candidates = 0;  // how many were probed
};

// Held while tuning (process-wide): the caller takes it, looks the problem up again (another
// thread may have tuned it meanwhile) and only then calls find_fastest.
std::unique_lock<std::mutex> tuning_lock();

// The fastest candidate for `problem` on `device`, timed on `s` (the device is current; the
// caller holds tuning_lock()). nullopt when there is no memory for the scratch operands (the
// caller runs Default, unrecorded).
std::optional<TuneOutcome> find_fastest(int device, cudakit::detail::StreamHandle s,
                                        const cudakit::detail::GemmArgs& problem);

// Bytes one stored operand occupies: (cols - 1) * ld + rows elements of `elem` bytes.
std::size_t operand_bytes(std::int64_t rows, std::int64_t cols, std::int64_t ld, std::size_t elem);
// The same for all matrices of a strided batch (stride >= 0 elements between them): the last
// matrix ends (batch - 1) * stride elements after the first. One matrix for batch <= 1 or a
// stride-0 (broadcast) operand.
std::size_t batch_operand_bytes(std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                std::int64_t stride, std::int64_t batch, std::size_t elem);

}  // namespace cudakit::tunable::detail
