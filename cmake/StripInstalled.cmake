# cudakit_strip_installed(<path relative to the install prefix, or absolute> ...)
#
# Release packages without debug info (issue 15.6): at `cmake --install`, each listed binary's
# DWARF is moved into <build>/debug/<name>.debug and the installed copy is stripped of it and
# given a .gnu_debuglink to that file (gdb finds it through `set debug-file-directory` or a
# copy beside the library). The symbol table stays, so backtraces and the allocator's
# recorded frames still have function names. With debug info the install was 23.7 MB for
# libcudakit.so plus 18.5 MB for the extension; the build tree keeps its unstripped binaries.
#
# Why at install rather than with CMAKE_BUILD_TYPE=Release: developers and CI keep
# RelWithDebInfo builds (tests and sanitizer reports want line numbers), and one build tree
# can then produce both. `-DCUDAKIT_STRIP_INSTALL=OFF` installs the binaries as built.
function(cudakit_strip_installed)
  if(NOT CMAKE_OBJCOPY)
    message(WARNING "cudakit: no objcopy: installed libraries keep their debug info")
    return()
  endif()
  set(_debug_dir "${CMAKE_BINARY_DIR}/debug")
  foreach(rel ${ARGN})
    install(CODE "
      set(_rel \"${rel}\")
      if(IS_ABSOLUTE \"\${_rel}\")
        set(_file \"\$ENV{DESTDIR}\${_rel}\")
      else()
        set(_file \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/\${_rel}\")
      endif()
      # Absent when an OPTIONAL install rule skipped a target that was not built (cmake
      # --install after building only some targets): nothing to strip then.
      if(EXISTS \"\${_file}\")
      get_filename_component(_name \"\${_file}\" NAME)
      file(MAKE_DIRECTORY \"${_debug_dir}\")
      set(_dbg \"${_debug_dir}/\${_name}.debug\")
      execute_process(COMMAND \"${CMAKE_OBJCOPY}\" --only-keep-debug \"\${_file}\" \"\${_dbg}\"
                      RESULT_VARIABLE _rc1)
      execute_process(COMMAND \"${CMAKE_OBJCOPY}\" --strip-debug --add-gnu-debuglink=\${_dbg}
                              \"\${_file}\" RESULT_VARIABLE _rc2)
      if(NOT _rc1 EQUAL 0 OR NOT _rc2 EQUAL 0)
        message(FATAL_ERROR \"cudakit: stripping \${_file} failed (objcopy \${_rc1} / \${_rc2})\")
      endif()
      message(STATUS \"Stripped: \${_file} (debug info: \${_dbg})\")
      endif()
    ")
  endforeach()
endfunction()
