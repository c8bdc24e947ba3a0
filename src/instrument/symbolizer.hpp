// C++ frames of allocation history and of the stream sanitizer's reports, symbolised at
// snapshot time (never on the allocation path).
//
// Three sources, each used where the one before has no answer:
//  1. the dynamic symbol table (dladdr): exported functions of shared libraries, and of
//     executables linked with -rdynamic;
//  2. the object's own static symbol table (.symtab, read from the file once per object):
//     functions a library or an executable does not export (internal linkage, anonymous
//     namespaces, executables linked without -rdynamic, issue 30). Stripped objects have
//     none: their frames keep the object's name and the address;
//  3. file and line from the object's DWARF line tables, through binutils' addr2line, one
//     process per object and snapshot for all of that snapshot's new addresses, only for
//     objects that carry .debug_line (RelWithDebInfo builds do; libtorch, libc do not).
//     Without addr2line on PATH, or with CUDAKIT_SYMBOLIZE_LINES=0, frames keep the
//     object's path and line 0.
// Rejected: libdw / libbacktrace (a new build dependency for a snapshot-time nicety; the
// elfutils API is large, and libbacktrace is not packaged on Debian 12) and glibc's
// backtrace_symbols (dynamic symbols only, no lines). Every answer is cached for the life of
// the process: a program taking many snapshots symbolises each address once.
//
// Thread-safety: every function is thread-safe (one mutex around the caches; addr2line runs
// without it held).
#pragma once

#include <string>
#include <vector>

namespace cudakit::instrument {

struct CppFrameSymbol {
  std::string name;  // demangled function name, or the address ("0x...") when unknown
  std::string file;  // source file when the line tables answered, else the object's path
  int line = 0;      // 0: unknown
};

// Symbolises every address of `pcs` not seen before, in one batch per object (return
// addresses: the call instruction before each is looked up). Call before cpp_frame_symbol()
// for a snapshot's frames, so that addr2line runs once per object rather than per frame.
void prepare_cpp_frame_symbols(const std::vector<void*>& pcs);

// The symbol of one return address (from the cache; computed alone when not prepared).
CppFrameSymbol cpp_frame_symbol(void* pc);

// Sources 1 and 2 only (no addr2line process, no cache of its own): the name, and the
// object's path as `file`. For reports formatted one frame at a time (the stream sanitizer).
CppFrameSymbol cpp_frame_name(void* pc);

}  // namespace cudakit::instrument
