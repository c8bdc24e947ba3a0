// DLPack ABI (https://dmlc.github.io/dlpack/latest/, v1.x) and cudakit's conversions.
//
// The structs are declared here from the published specification (ABI-compatible with
// dlpack.h v1.0), in namespace cudakit::dlpack so they never clash with another library's
// copy of dlpack.h in the same program.
//
// Device mapping: device tensors are exported as kDLCUDA with their device index — also on
// the emulated backend, whose device memory is host memory but must not be mistaken for
// the CPU (consumers such as NumPy therefore refuse emulated device tensors: move them
// with .cpu() first). Pinned host tensors are kDLCUDAHost, pageable ones kDLCPU.
//
// Thread-safety: the conversion functions are thread-safe; a DLManagedTensor is owned by
// exactly one consumer, whose deleter call may come from any thread.
#pragma once

#include <cstdint>

#include "cudakit/export.hpp"
#include "cudakit/tensor.hpp"

namespace CUDAKIT_API cudakit {
namespace dlpack {

extern "C" {
struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
enum DLDeviceType : std::int32_t {
  kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLOpenCL = 4, kDLVulkan = 7, kDLMetal = 8,
  kDLVPI = 9, kDLROCM = 10, kDLROCMHost = 11, kDLExtDev = 12, kDLCUDAManaged = 13,
  kDLOneAPI = 14, kDLWebGPU = 15, kDLHexagon = 16
};
struct DLDevice {
  DLDeviceType device_type;
  std::int32_t device_id;
};
enum DLDataTypeCode : std::uint8_t {
  kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLOpaqueHandle = 3, kDLBfloat = 4, kDLComplex = 5,
  kDLBool = 6
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; NULL = compact row-major
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
inline constexpr std::uint64_t DLPACK_FLAG_BITMASK_READ_ONLY = 1ull << 0;
inline constexpr std::uint64_t DLPACK_FLAG_BITMASK_IS_COPIED = 1ull << 1;
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
}  // extern "C"

inline constexpr std::uint32_t kMajorVersion = 1;
inline constexpr std::uint32_t kMinorVersion = 0;

DLDevice device_of(const Tensor& t);
DLDataType to_dl_dtype(DType t);
DType from_dl_dtype(DLDataType t);  // ValueError for unsupported types (lanes != 1, ...)

// Export: the returned object keeps `t`'s storage alive until its deleter runs.
DLManagedTensorVersioned* to_dlpack_versioned(const Tensor& t, std::uint64_t flags = 0);
DLManagedTensor* to_dlpack(const Tensor& t);

// Import without copying: takes ownership (the deleter runs when the last view dies, or
// immediately if this throws). `release` overrides how the deleter is invoked (the Python
// layer defers foreign deleters to a thread holding the GIL); empty = call it directly.
Tensor from_dlpack(DLManagedTensorVersioned* m, std::function<void(std::function<void()>)> release = {});
Tensor from_dlpack(DLManagedTensor* m, std::function<void(std::function<void()>)> release = {});

}  // namespace dlpack
}  // namespace cudakit
