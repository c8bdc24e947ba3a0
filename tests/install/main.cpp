#include <cudakit/device.hpp>
#include <cudakit/stream.hpp>

#include <cstdio>

int main() {
  std::printf("backend=%s devices=%d\n", cudakit::backend_name().c_str(), cudakit::device_count());
  if (!cudakit::is_available()) return 0;
  cudakit::Stream s(0);
  s.sync();
  return 0;
}
