#include "ops/kernels.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "backend/kernel_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"

#if defined(CUDAKIT_WITH_KERNELS)
extern "C" const unsigned char cudakit_fatbin_ops[];
extern "C" const unsigned char cudakit_fatbin_random[];
extern "C" const unsigned char cudakit_fatbin_comm[];
#endif

namespace cudakit::ops {

detail::FunctionHandle get_kernel(int device, KernelModule m, const char* name) {
#if !defined(CUDAKIT_WITH_KERNELS)
  (void)device; (void)m;
  throw NotSupportedError(std::string("built-in CUDA kernel '") + name +
                          "' is unavailable: cudakit was built without nvcc (CUDAKIT_WITH_KERNELS off)");
#else
  // The slow path of cached_kernel(): each (device, module, name) is looked up here once per
  // slot, so a map under a lock is enough.
  using Key = std::tuple<int, int, std::string>;
  Key key{device, static_cast<int>(m), name};
  static std::mutex mu;
  static std::map<std::pair<int, int>, detail::ModuleHandle> modules;
  static std::map<Key, detail::FunctionHandle> functions;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = functions.find(key); it != functions.end()) return it->second;
  auto& mod = modules[{device, static_cast<int>(m)}];
  if (!mod) {
    const void* image = m == KernelModule::ops      ? static_cast<const void*>(cudakit_fatbin_ops)
                        : m == KernelModule::random ? static_cast<const void*>(cudakit_fatbin_random)
                                                    : static_cast<const void*>(cudakit_fatbin_comm);
    mod = detail::kernel_ops().module_load_data(device, image);
  }
  detail::FunctionHandle f = detail::kernel_ops().module_get_function(mod, name);
  functions[key] = f;
  return f;
#endif
}

std::atomic<detail::FunctionHandle>& kernel_slot(int device, KernelModule m, int slot) {
  using Module = std::array<std::atomic<detail::FunctionHandle>, kKernelSlotsPerModule>;
  static std::array<std::array<Module, kKernelModules>, kMaxDevices> table{};  // zero: not looked up
  if (device < 0 || device >= kMaxDevices) [[unlikely]] device = resolve_device(device);  // throws
  return table[static_cast<std::size_t>(device)][static_cast<std::size_t>(m)][static_cast<std::size_t>(slot)];
}

int multiprocessor_count(int device) {
  static std::array<std::atomic<int>, kMaxDevices> counts{};
  if (device < 0 || device >= kMaxDevices) [[unlikely]] device = resolve_device(device);  // throws
  std::atomic<int>& c = counts[static_cast<std::size_t>(device)];
  int n = c.load(std::memory_order_relaxed);
  if (n == 0) {
    n = std::max(1, get_device_properties(device).multi_processor_count);
    c.store(n, std::memory_order_relaxed);
  }
  return n;
}

detail::Dim3 grid_for(int device, std::int64_t work_items, unsigned block) {
  const std::int64_t max_blocks = std::int64_t{multiprocessor_count(device)} * 8;  // 8 x 256 threads per SM
  std::int64_t need = (work_items + block - 1) / block;
  if (need < 1) need = 1;
  return detail::Dim3{static_cast<unsigned>(std::min(need, max_blocks)), 1, 1};
}

}  // namespace cudakit::ops
