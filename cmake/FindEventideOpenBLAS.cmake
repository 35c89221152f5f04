# Finds OpenBLAS with its CBLAS header, and makes the imported target eventide_openblas.
#
# Debian and Ubuntu also ship the reference BLAS, whose cblas.h may come first on the include
# path; this looks for OpenBLAS's own header and library, so that matmul runs on OpenBLAS.
find_package(OpenBLAS CONFIG QUIET)
find_path(EVENTIDE_OPENBLAS_INCLUDE_DIR cblas.h
  HINTS ${OpenBLAS_INCLUDE_DIRS}
  PATH_SUFFIXES openblas-pthread openblas openblas-openmp x86_64-linux-gnu/openblas-pthread
  )
find_library(EVENTIDE_OPENBLAS_LIBRARY NAMES openblas
  HINTS ${OpenBLAS_LIBRARIES}
  PATH_SUFFIXES openblas-pthread openblas
  )
if(OpenBLAS_LIBRARIES AND NOT EVENTIDE_OPENBLAS_LIBRARY)
  set(EVENTIDE_OPENBLAS_LIBRARY ${OpenBLAS_LIBRARIES})
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(EventideOpenBLAS
  REQUIRED_VARS EVENTIDE_OPENBLAS_LIBRARY EVENTIDE_OPENBLAS_INCLUDE_DIR
  FAIL_MESSAGE "OpenBLAS not found: install libopenblas-dev (make deps does it as root)")
if(EventideOpenBLAS_FOUND AND NOT TARGET eventide_openblas)
  add_library(eventide_openblas INTERFACE IMPORTED)
  set_target_properties(eventide_openblas PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${EVENTIDE_OPENBLAS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${EVENTIDE_OPENBLAS_LIBRARY}")
endif()
