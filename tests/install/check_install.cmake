# Installs the build tree into a scratch prefix, then builds and runs tests/install/consumer
# against it through find_package(eventide). Run by ctest: cmake -DBUILD=... -DSOURCE=... -P
file(REMOVE_RECURSE ${BUILD}/install-check)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${BUILD}/install-check/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed")
endif()
# What the package config makes consumers link: the library and Threads, nothing that
# libeventide links privately (OpenBLAS; CUDA's cuBLASLt, CUPTI, runtime), nothing it
# compiles with (nlohmann_json). A consumer of a CUDA build then needs no CUDA package to
# configure, and only the CUDA runtime at run time, through libeventide.
file(GLOB_RECURSE targets_files ${BUILD}/install-check/prefix/*/eventideTargets*.cmake)
if(NOT targets_files)
  message(FATAL_ERROR "no eventideTargets*.cmake installed")
endif()
foreach(f ${targets_files})
  file(STRINGS ${f} interface_lines REGEX "INTERFACE_LINK_LIBRARIES")
  foreach(line ${interface_lines})
    if(line MATCHES "CUDA::|cupti|cublas|cudart|openblas|nlohmann")
      message(FATAL_ERROR "${f} makes consumers link a private dependency: ${line}")
    endif()
  endforeach()
  file(STRINGS ${f} lines REGEX "find_package|find_dependency|CUDAToolkit")
  if(lines)
    message(FATAL_ERROR "${f} looks for a package: ${lines}")
  endif()
endforeach()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/tests/install/consumer
                        -B ${BUILD}/install-check/consumer
                        -DCMAKE_PREFIX_PATH=${BUILD}/install-check/prefix
                        -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD}/install-check/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed")
endif()
execute_process(COMMAND ${BUILD}/install-check/consumer/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer failed")
endif()
