# An installed prefix runs as it is, wherever it is: the build tree installed into a scratch
# prefix, that prefix moved, then run from there with a clean environment (env -i
# PATH=/usr/bin:/bin: no LD_LIBRARY_PATH, nothing of this build's): the installed
# `eventide info`, and a program compiled with the README's line alone,
#   c++ -std=c++20 app.cpp $(pkg-config --cflags --libs eventide)
# with PKG_CONFIG_PATH naming the prefix for that step only. Each finds libeventide through
# the RPATH it was given: the program's is relative to itself ($ORIGIN, tools/CMakeLists.txt),
# the pkg-config build's comes from eventide.pc's Libs.
# Run by ctest: cmake -DBUILD=... -DCXX=... -DLIBDIR=... -DBINDIR=... -DWITH_CLI=ON|OFF -P
set(dir ${BUILD}/prefix-run-check)
file(REMOVE_RECURSE ${dir})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${dir}/installed
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed")
endif()
# Moved: nothing may lead back to where it was installed.
file(RENAME ${dir}/installed ${dir}/prefix)
set(prefix ${dir}/prefix)
set(clean env -i PATH=/usr/bin:/bin)

# Runs COMMAND... with the clean environment; fails naming WHAT unless it exits 0.
function(run_clean what)
  execute_process(COMMAND ${clean} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  message(STATUS "${what}: exit ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc}), with env -i PATH=/usr/bin:/bin: ${err}")
  endif()
endfunction()

if(WITH_CLI)
  run_clean("the installed eventide info" ${prefix}/${BINDIR}/eventide info)
endif()

find_program(PKG_CONFIG NAMES pkg-config pkgconf PATHS /usr/bin /bin NO_DEFAULT_PATH)
if(NOT PKG_CONFIG)
  message("SKIPPED: neither pkg-config nor pkgconf is in /usr/bin (Debian: pkgconf)")
  return()
endif()
file(WRITE ${dir}/app.cpp [=[
// A matmul, waited for through an event: it runs only if libeventide was found.
#include <eventide/eventide.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace ev = eventide;

int main() {
  ev::Tensor a = ev::ones({64, 64}, ev::DType::f32, ev::Device::cpu());
  ev::Tensor c = ev::matmul(a, a);
  ev::Event e;
  e.record(c);
  e.wait();
  const float first = c.to_vector<float>()[0];
  std::printf("eventide %s from a pkg-config build: matmul gave %g\n",
              std::string(ev::version()).c_str(), first);
  return first == 64.0f ? 0 : 1;
}
]=])
# (The README's line, with this build's compiler and the pkg-config found: sh's $0 and $1.)
run_clean("building app.cpp with pkg-config's flags"
          PKG_CONFIG_PATH=${prefix}/${LIBDIR}/pkgconfig sh -c
          "cd '${dir}' && \"$0\" -std=c++20 app.cpp $(\"$1\" --cflags --libs eventide) -o app"
          ${CXX} ${PKG_CONFIG})
run_clean("the program built with pkg-config's flags" ${dir}/app)
