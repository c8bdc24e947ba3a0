#include "ops/kernels.hpp"

#include <map>
#include <mutex>
#include <string>
#include <tuple>

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
  // Lookups after the first are served from a per-thread cache (no lock on the hot path).
  using Key = std::tuple<int, int, std::string>;
  thread_local std::map<Key, detail::FunctionHandle> cache;
  Key key{device, static_cast<int>(m), name};
  if (auto it = cache.find(key); it != cache.end()) return it->second;

  static std::mutex mu;
  static std::map<std::pair<int, int>, detail::ModuleHandle> modules;
  static std::map<Key, detail::FunctionHandle> functions;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = functions.find(key); it != functions.end()) return cache[key] = it->second;
  auto& mod = modules[{device, static_cast<int>(m)}];
  if (!mod) {
    const void* image = m == KernelModule::ops      ? static_cast<const void*>(cudakit_fatbin_ops)
                        : m == KernelModule::random ? static_cast<const void*>(cudakit_fatbin_random)
                                                    : static_cast<const void*>(cudakit_fatbin_comm);
    mod = detail::backend().module_load_data(device, image);
  }
  detail::FunctionHandle f = detail::backend().module_get_function(mod, name);
  functions[key] = f;
  return cache[key] = f;
#endif
}

detail::Dim3 grid_for(int device, std::int64_t work_items, unsigned block) {
  static thread_local std::map<int, std::int64_t> sms;
  auto it = sms.find(device);
  if (it == sms.end()) it = sms.emplace(device, get_device_properties(device).multi_processor_count).first;
  std::int64_t max_blocks = std::max<std::int64_t>(1, it->second) * 8;  // 8 x 256 threads per SM
  std::int64_t need = (work_items + block - 1) / block;
  if (need < 1) need = 1;
  return detail::Dim3{static_cast<unsigned>(std::min(need, max_blocks)), 1, 1};
}

}  // namespace cudakit::ops
