# Builds tests/install/fetch_content, a project that adds eventide with FetchContent from this
# source tree, and runs its program. Every optional package is made unfindable
# (CMAKE_DISABLE_FIND_PACKAGE_*), so it passes only if the library needs nothing beyond its
# required dependencies (Threads, OpenBLAS; CUDA when on). Run by ctest:
#   cmake -DBUILD=... -DSOURCE=... -DCXX=... -DGENERATOR=... -DWITH_CUDA=... -P
set(dir ${BUILD}/fetch-content-check)
# A fresh configure each time; the objects of the last run are kept (ninja/make rebuild what
# changed), as the library takes minutes to build on two cores.
file(REMOVE ${dir}/CMakeCache.txt)
file(REMOVE_RECURSE ${dir}/CMakeFiles ${dir}/_deps/eventide-subbuild)
set(unfindable "")
foreach(package nlohmann_json CLI11 GTest benchmark pybind11 Python)
  list(APPEND unfindable -DCMAKE_DISABLE_FIND_PACKAGE_${package}=ON)
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/tests/install/fetch_content -B ${dir}
                        -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=${CXX}
                        -DFETCHCONTENT_SOURCE_DIR_EVENTIDE=${SOURCE}
                        -DEVENTIDE_WITH_CUDA=${WITH_CUDA} ${unfindable}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the FetchContent consumer failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${dir} --target fetch_content_consumer
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the FetchContent consumer failed")
endif()
execute_process(COMMAND ${dir}/fetch_content_consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the FetchContent consumer failed")
endif()
