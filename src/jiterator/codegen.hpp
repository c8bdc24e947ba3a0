// The source of one jiterator kernel: a self-contained C++17 translation unit that compiles
// with NVRTC (a __global__ kernel; no standard headers there, so a small shim stands in) and
// with the host C++ compiler (an extern "C" function looping over the elements, for the
// emulated backend). `__CUDACC_RTC__` selects the entry; everything between — element
// types, conversions, index arithmetic, the call of the user's function — is the same text
// for both, so the emulated backend runs the very code the GPU runs.
//
// Element types and conversions are src/kernels/numeric.hpp itself (embedded at build time),
// the same ones the built-in ops use, so a jitted x + y and the built-in add agree bit for bit
// on float16 / bfloat16 rounding and on every dtype conversion.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "jiterator/parse.hpp"
#include "jiterator/spec.hpp"

namespace cudakit::jit {

// File names the source gives the user's code and the generated code (#line), which the
// compilers repeat in their diagnostics.
inline constexpr const char* kUserFile = "jiterator_code";
inline constexpr const char* kGeneratedFile = "jiterator_generated";

// Name of the kernel / host entry in the compiled module.
std::string kernel_symbol(const ParsedCode& parsed);

std::string generate_source(const std::string& code, const ParsedCode& parsed,
                            const KernelSpec& spec);

}  // namespace cudakit::jit
