# Installs the build tree into a scratch prefix, then compiles tests/install/consumer/main.cpp
# with nothing but what `pkg-config --cflags --libs eventide` says, and runs it. Run by ctest:
#   cmake -DBUILD=... -DSOURCE=... -DCXX=... -DLIBDIR=... -DVERSION=... -P
set(dir ${BUILD}/pkg-config-check)
set(prefix ${dir}/prefix)
find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG)
  message("SKIPPED: neither pkg-config nor pkgconf is installed (Debian: pkgconf)")
  return()
endif()
file(REMOVE_RECURSE ${dir})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed")
endif()

# Only this prefix's eventide.pc: not one a `make install` left in /usr/local.
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
execute_process(COMMAND ${PKG_CONFIG} --modversion eventide
                OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(rc OR NOT version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion eventide: '${version}', expected '${VERSION}'")
endif()
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs eventide
                OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "pkg-config --cflags --libs eventide failed")
endif()
message(STATUS "pkg-config --cflags --libs eventide: ${flags}")
# The relocatable prefix (${pcfiledir}) must have led to this prefix, and the program must
# find the library there when it runs (its rpath: install.prefix_runs_moved_with_no_library_path
# runs one with a clean environment).
if(NOT flags MATCHES "-L[^ ]*${LIBDIR}")
  message(FATAL_ERROR "the flags name no library directory under the prefix: ${flags}")
endif()
if(NOT flags MATCHES "-Wl,-rpath,[^ ]*${LIBDIR}")
  message(FATAL_ERROR "the flags give the program no rpath to the library directory: ${flags}")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
execute_process(COMMAND ${CXX} -std=c++20 ${SOURCE}/tests/install/consumer/main.cpp ${flags}
                        -o ${dir}/consumer
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "compiling the consumer with pkg-config's flags failed")
endif()
execute_process(COMMAND ${dir}/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer built with pkg-config's flags failed")
endif()
