// Symbol visibility of libcudakit.so. The library is built with hidden visibility by default
// (-fvisibility=hidden): only what a public header declares inside `namespace CUDAKIT_API
// cudakit` is exported, so internal helpers cannot collide with other libraries' symbols nor
// become an accidental ABI. tests/layout/test_exports.py enforces the list.
//
// The attribute is spelled as a standard attribute, [[gnu::visibility("default")]], because
// that is the one spelling g++, clang++ and nvcc all accept right after `namespace` (the
// C++11 attribute position). The GNU spelling __attribute__((...)) is rejected there by clang
// ("expected identifier or '{'"), and after the name it is accepted but reads as a different
// rule. tests/layout/test_headers.py compiles every public header alone with each compiler.
//
// CUDAKIT_INTERNAL_API marks the few internal (detail) entry points that cudakit's own
// Python extension and allocator plug-in link against. They are not public API: no
// stability promise, no documentation beyond their header.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define CUDAKIT_API [[gnu::visibility("default")]]
#else
#define CUDAKIT_API
#endif
#define CUDAKIT_INTERNAL_API CUDAKIT_API
