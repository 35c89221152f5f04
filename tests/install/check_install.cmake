# Installs the build tree into a scratch prefix, then builds and runs tests/install/consumer
# against it through find_package(eventide). Run by ctest: cmake -DBUILD=... -DSOURCE=... -P
file(REMOVE_RECURSE ${BUILD}/install-check)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${BUILD}/install-check/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed")
endif()
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
