// cudakit::profiler start/stop/ProfileGuard on the backend the suite runs on (emulated in CI;
// cuProfilerStart/Stop on a GPU through scripts/gpu-check.sh), observed through
// profiler::state(); a clear AcceleratorError on the cuda backend without a device.
#include "cudakit/profiler.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <type_traits>

#include "backend/backend.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"

namespace {

using cudakit::profiler::state;
using State = cudakit::profiler::State;

bool on_emulated() { return std::strcmp(cudakit::detail::backend().name(), "emulated") == 0; }

TEST(Profiler, StartStopToggleTheState) {
  if (!cudakit::is_available()) GTEST_SKIP() << "no device";
  State before = state();
  cudakit::profiler::start();
  State s = state();
  EXPECT_TRUE(s.active);
  EXPECT_EQ(s.starts, before.starts + 1);
  cudakit::profiler::start();  // idempotent, as cuProfilerStart
  EXPECT_TRUE(state().active);
  cudakit::profiler::stop();
  s = state();
  EXPECT_FALSE(s.active);
  EXPECT_EQ(s.stops, before.stops + 1);
  cudakit::profiler::stop();
  EXPECT_FALSE(state().active);
}

TEST(Profiler, GuardCoversItsScopeAndStartsFromAnyThread) {
  if (!cudakit::is_available()) GTEST_SKIP() << "no device";
  {
    cudakit::profiler::ProfileGuard guard;
    EXPECT_TRUE(state().active);
  }
  EXPECT_FALSE(state().active);
  std::thread([] { cudakit::profiler::start(); }).join();  // process-wide switch
  EXPECT_TRUE(state().active);
  cudakit::profiler::stop();
  EXPECT_FALSE(state().active);
  static_assert(std::is_nothrow_destructible_v<cudakit::profiler::ProfileGuard>);
}

TEST(Profiler, CudaWithADeviceStartsAndStops) {
  if (on_emulated()) GTEST_SKIP() << "cuda backend only";
  if (!cudakit::is_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_NO_THROW(cudakit::profiler::start());
  EXPECT_NO_THROW(cudakit::profiler::stop());
  { cudakit::profiler::ProfileGuard guard; }
  std::thread([] {  // a fresh thread gets device 0's context, as with cudaProfilerStart
    EXPECT_NO_THROW(cudakit::profiler::start());
    EXPECT_NO_THROW(cudakit::profiler::stop());
  }).join();
  EXPECT_FALSE(state().active);
}

TEST(Profiler, CudaWithoutADeviceThrowsAcceleratorErrorNamingTheCall) {
  if (on_emulated()) GTEST_SKIP() << "cuda backend only";
  if (cudakit::is_available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    cudakit::profiler::start();
    ADD_FAILURE() << "start() did not throw without a device";
  } catch (const cudakit::AcceleratorError& e) {
    EXPECT_NE(std::string(e.what()).find("profiler_start"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cudakit::profiler::stop(), cudakit::AcceleratorError);
  EXPECT_THROW(cudakit::profiler::ProfileGuard(), cudakit::AcceleratorError);
}

}  // namespace
