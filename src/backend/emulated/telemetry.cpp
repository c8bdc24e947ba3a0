// Telemetry the emulator can measure truthfully: utilization (fraction of the last 100 ms in
// which at least one of the device's workers was running a task) and memory in use. Sensor
// readings (temperature, power, clocks, memory-controller load) do not exist here.
#include <unistd.h>

#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {
constexpr auto kWindow = std::chrono::milliseconds(100);

[[noreturn]] void no_sensor(const char* what) {
  throw NotSupportedError(std::string(what) +
                          " is not available on the emulated backend (no hardware sensor); "
                          "use the cuda backend with NVML for it");
}
}  // namespace

void EmulatedBackend::note_busy(Device& d, bool start) {
  auto now = Clock::now();
  std::lock_guard lock(d.tmu);
  if (start) {
    if (d.busy++ == 0) d.busy_since = now;
    return;
  }
  if (--d.busy == 0) {
    d.intervals.emplace_back(d.busy_since, now);
    while (!d.intervals.empty() && d.intervals.front().second < now - kWindow) {
      d.intervals.pop_front();
    }
    if (d.intervals.size() > 4096) d.intervals.pop_front();
  }
}

int EmulatedBackend::utilization_percent(int device) {
  Device& d = dev(device);
  auto now = Clock::now();
  auto from = now - kWindow;
  Clock::duration busy{0};
  std::lock_guard lock(d.tmu);
  for (const auto& [b, e] : d.intervals) {
    auto s = std::max(b, from);
    if (e > s) busy += e - s;
  }
  if (d.busy > 0) busy += now - std::max(d.busy_since, from);
  auto pct = 100.0 * std::chrono::duration<double>(busy).count() /
             std::chrono::duration<double>(kWindow).count();
  return static_cast<int>(std::min(100.0, pct + 0.5));
}

int EmulatedBackend::memory_utilization_percent(int device) {
  dev(device);
  no_sensor("memory_utilization_percent");
}
int EmulatedBackend::temperature_c(int device) {
  dev(device);
  no_sensor("temperature_c");
}
int EmulatedBackend::power_draw_mw(int device) {
  dev(device);
  no_sensor("power_draw_mw");
}
int EmulatedBackend::clock_rate_mhz(int device) {
  dev(device);
  no_sensor("clock_rate_mhz");
}

std::size_t EmulatedBackend::device_memory_used(int device) {
  return dev(device).used.load(std::memory_order_relaxed);
}

std::vector<Backend::ProcessMemory> EmulatedBackend::gpu_processes(int device) {
  return {ProcessMemory{static_cast<int>(::getpid()), device_memory_used(device)}};
}

}  // namespace cudakit::detail::emulated
