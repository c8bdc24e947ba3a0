// Symbol visibility of libcudakit.so. The library is built with hidden visibility by default
// (-fvisibility=hidden): only what a public header declares inside `namespace CUDAKIT_API
// cudakit` is exported, so internal helpers cannot collide with other libraries' symbols nor
// become an accidental ABI. tests/symbols/check_exports.py enforces the list.
//
// CUDAKIT_INTERNAL_API marks the few internal (detail) entry points that cudakit's own
// Python extension and allocator plug-in link against. They are not public API: no
// stability promise, no documentation beyond their header.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define CUDAKIT_API __attribute__((visibility("default")))
#else
#define CUDAKIT_API
#endif
#define CUDAKIT_INTERNAL_API CUDAKIT_API
