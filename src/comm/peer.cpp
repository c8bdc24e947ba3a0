#include "comm/peer.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "backend/device_ops.hpp"
#include "backend/kernel_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "kernels/reduce.hpp"
#include "ops/dispatch.hpp"
#include "ops/executor.hpp"
#include "ops/kernels.hpp"

namespace cudakit::detail {
namespace {

constexpr unsigned kBlock = 512;       // = __launch_bounds__ of the kernels in comm.cu
constexpr int kUnroll = 4;             // 16-byte vectors per thread per iteration (upper bound)
constexpr int kCopyBlocksPerSm = 2;    // = ck_peer_copy's minimum blocks per SM
constexpr int kReduceBlocksPerSm = 1;  // = ck_peer_reduce_*'s

// Per ordered pair: 0 unknown, 1 enabled, -1 impossible.
std::atomic<signed char>& pair_state(int from, int to) {
  static std::array<std::atomic<signed char>, kMaxDevices * kMaxDevices> states{};
  return states[static_cast<std::size_t>(from * kMaxDevices + to)];
}

// Kernel slots of the comm module: 0 the copy, 1 + dtype code the reductions.
static_assert(1 + kNumDTypes <= ops::kKernelSlotsPerModule, "comm kernel slots");
// One resident wave (the kernels loop over the data): more blocks would only queue behind it.
Dim3 grid(int device, std::int64_t vectors, int blocks_per_sm) {
  const std::int64_t sms = ops::multiprocessor_count(device);
  const std::int64_t need = (vectors + std::int64_t{kBlock} * kUnroll - 1) / (std::int64_t{kBlock} * kUnroll);
  return Dim3{static_cast<unsigned>(std::clamp<std::int64_t>(need, 1, sms * blocks_per_sm)), 1, 1};
}

bool runs_kernels() {
  static const bool k = device_ops().capabilities().runs_kernels;  // fixed for the process
  return k;
}

}  // namespace

bool peer_access(int from, int to, std::string* why) {
  if (from == to) return true;
  auto& st = pair_state(from, to);
  signed char s = st.load(std::memory_order_acquire);
  if (s == 0) {
    DeviceOps& be = device_ops();
    if (!be.can_access_peer(from, to)) {
      s = -1;
    } else {
      be.enable_peer_access(from, to);  // idempotent; maps every allocation of `to` in `from`
      s = 1;
    }
    st.store(s, std::memory_order_release);
  }
  if (s < 0 && why) {
    *why = "cuda:" + std::to_string(from) + " has no peer access to cuda:" + std::to_string(to);
  }
  return s > 0;
}

bool peer_mappable(const Tensor& t) {
  return t.numel() == 0 || device_ops().peer_mappable(t.data_ptr());
}

void peer_copy(int src_device, const void* src, const std::vector<void*>& dsts, std::size_t bytes,
               std::shared_ptr<const void> keep) {
  if (bytes == 0 || dsts.empty()) return;
  if (dsts.size() > static_cast<std::size_t>(ops::kMaxPeerBuffers)) {
    throw NotSupportedError("peer copy: at most " + std::to_string(ops::kMaxPeerBuffers) +
                            " destinations per launch");
  }
  ops::PeerCopyArgs a{};
  a.src = src;
  a.ndst = static_cast<int>(dsts.size());
  for (std::size_t k = 0; k < dsts.size(); ++k) a.dst[k] = dsts[k];
  a.bytes = static_cast<std::int64_t>(bytes);
  const Device d = Device::cuda(src_device);
  if (!runs_kernels()) {
    ops::run_cpu(d, {}, [a, keep = std::move(keep)] {
      for (int k = 0; k < a.ndst; ++k) std::memcpy(a.dst[k], a.src, static_cast<std::size_t>(a.bytes));
    }, "ck_peer_copy");
    return;
  }
  FunctionHandle f = ops::cached_kernel(src_device, ops::KernelModule::comm, 0, [] { return std::string("ck_peer_copy"); });
  void* params[] = {&a};
  DeviceGuard guard(src_device);  // the function belongs to src_device's context
  kernel_ops().launch_kernel(f, grid(src_device, a.bytes / 16 + 1, kCopyBlocksPerSm), Dim3{kBlock, 1, 1}, 0,
                          ops::stream_for(d), params);
}

void peer_reduce(int dst_device, void* out, const std::vector<const void*>& inputs, std::int64_t n,
                 DType dtype, std::shared_ptr<const void> keep) {
  if (n == 0) return;
  if (inputs.empty() || inputs.size() > static_cast<std::size_t>(ops::kMaxPeerBuffers)) {
    throw NotSupportedError("peer reduction: 1 to " + std::to_string(ops::kMaxPeerBuffers) +
                            " inputs per launch");
  }
  ops::PeerReduceArgs a{};
  a.out = out;
  a.nin = static_cast<int>(inputs.size());
  for (std::size_t k = 0; k < inputs.size(); ++k) a.in[k] = inputs[k];
  a.n = n;
  a.op = ops::kRedSum;
  const int code = static_cast<int>(dtype);
  const Device d = Device::cuda(dst_device);
  if (!runs_kernels()) {
    ops::run_cpu(d, {}, [a, code, keep = std::move(keep)] {
      ops::reduce_host(code, a.op, a.out, a.in, a.nin, a.n);
    }, "ck_peer_reduce");
    return;
  }
  FunctionHandle f = ops::cached_kernel(dst_device, ops::KernelModule::comm, 1 + code, [code] {
    return std::string("ck_peer_reduce_") + ops::dtype_suffix(code);
  });
  void* params[] = {&a};
  DeviceGuard guard(dst_device);
  const std::int64_t per_vec = element_size(dtype) >= 16 ? 1 : 16 / static_cast<std::int64_t>(element_size(dtype));
  kernel_ops().launch_kernel(f, grid(dst_device, n / per_vec + 1, kReduceBlocksPerSm), Dim3{kBlock, 1, 1}, 0,
                          ops::stream_for(d), params);
}

}  // namespace cudakit::detail
