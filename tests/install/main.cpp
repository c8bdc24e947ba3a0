// The umbrella header needs C++20 (#error otherwise): this consumer sets no standard, so it
// builds only because cudakit::cudakit carries cxx_std_20.
#include <cudakit/cudakit.hpp>

#include <cstdio>

int main() {
  std::printf("backend=%s devices=%d\n", cudakit::backend_name().c_str(), cudakit::device_count());
  if (!cudakit::is_available()) return 0;
  cudakit::Stream s(0);
  s.sync();
  return 0;
}
