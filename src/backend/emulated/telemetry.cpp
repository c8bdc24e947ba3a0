// The emulated backend's telemetry model. Every call answers (none raises), so code that
// polls telemetry runs unchanged on the emulator; capabilities().hardware_telemetry is false
// so callers can tell a model from a sensor.
//
//   utilization()        measured: % of the last 100 ms in which at least one of the
//                        device's stream workers was running a task.
//   memory_usage()       measured: % of the last 100 ms in which a copy or memset task ran
//                        (the emulator's stand-in for memory-controller load).
//   temperature()        derived: 30 C idle, +0.45 C per utilization point (75 C at 100%).
//   power_draw()         derived: 70 W idle, +6.3 W per utilization point (700 W, an
//                        H100 SXM's board limit, at 100%); milliwatts.
//   clock_rate()         derived: the device's maximum SM clock (properties.clock_rate)
//                        while busy, 345 MHz when idle, as a GPU boosts under load.
//   device_memory_used() measured: bytes the emulated device has allocated.
//
// Why a model rather than NotSupportedError for the sensors: the previous mix (utilization
// answered, the rest raised) made every monitoring loop special-case the emulator, and a
// deterministic function of measured load lets tests check that the readings move together.
#include <unistd.h>

#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {
constexpr auto kWindow = std::chrono::milliseconds(100);
constexpr int kIdleTemperatureC = 30;
constexpr int kIdlePowerMw = 70'000, kFullPowerMw = 700'000;
constexpr int kIdleClockMhz = 345;
}  // namespace

void BusyWindow::note(bool start) {
  auto now = Clock::now();
  std::lock_guard lock(mu_);
  if (start) {
    if (busy_++ == 0) busy_since_ = now;
    return;
  }
  if (--busy_ == 0) {
    intervals_.emplace_back(busy_since_, now);
    while (!intervals_.empty() && intervals_.front().second < now - kWindow) intervals_.pop_front();
    if (intervals_.size() > 4096) intervals_.pop_front();
  }
}

int BusyWindow::percent() {
  auto now = Clock::now();
  auto from = now - kWindow;
  Clock::duration busy{0};
  std::lock_guard lock(mu_);
  for (const auto& [b, e] : intervals_) {
    auto s = std::max(b, from);
    if (e > s) busy += e - s;
  }
  if (busy_ > 0) busy += now - std::max(busy_since_, from);
  auto pct = 100.0 * std::chrono::duration<double>(busy).count() /
             std::chrono::duration<double>(kWindow).count();
  return static_cast<int>(std::min(100.0, pct + 0.5));
}

int EmulatedBackend::utilization_percent(int device) { return dev(device).compute.percent(); }

int EmulatedBackend::memory_utilization_percent(int device) {
  return dev(device).memory.percent();
}

int EmulatedBackend::temperature_c(int device) {
  return kIdleTemperatureC + utilization_percent(device) * 45 / 100;
}

int EmulatedBackend::power_draw_mw(int device) {
  return kIdlePowerMw + utilization_percent(device) * ((kFullPowerMw - kIdlePowerMw) / 100);
}

int EmulatedBackend::clock_rate_mhz(int device) {
  if (utilization_percent(device) == 0) return kIdleClockMhz;
  return device_info(device).clock_rate / 1000;  // kHz -> MHz
}

std::size_t EmulatedBackend::device_memory_used(int device) {
  return dev(device).used.load(std::memory_order_relaxed);
}

std::vector<Backend::ProcessMemory> EmulatedBackend::gpu_processes(int device) {
  return {ProcessMemory{static_cast<int>(::getpid()), device_memory_used(device)}};
}

}  // namespace cudakit::detail::emulated
