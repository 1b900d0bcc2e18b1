# FindOpenBLAS: the OpenBLAS library and its cblas.h, which the CPU kernels use for matrix
# products (runtime/kernels/cpu/blas.cc) and to set OpenBLAS's own thread count
# (openblas_set_num_threads, runtime/kernels/cpu/threads.cc).
#
# Provides the imported target OpenBLAS::OpenBLAS and OpenBLAS_FOUND. pkg-config's
# openblas.pc gives the search hints (Debian's libopenblas-dev ships one that points at
# the pthreads build in .../openblas-pthread/); without pkg-config the usual places are
# searched. The header is located through openblas_config.h so that the cblas.h found is
# OpenBLAS's own (it declares openblas_set_num_threads), not the reference BLAS's. This
# module is used instead of the OpenBLASConfig.cmake some distributions ship because that
# file defines no imported target. etr installs it beside etrConfig.cmake, so that a
# program linking the installed static libetr_runtime.a finds the same library again.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_OPENBLAS QUIET openblas)
endif()

find_path(OpenBLAS_INCLUDE_DIR NAMES openblas_config.h
          HINTS ${PC_OPENBLAS_INCLUDEDIR} ${PC_OPENBLAS_INCLUDE_DIRS}
          PATH_SUFFIXES openblas openblas-pthread openblas-openmp)
find_library(OpenBLAS_LIBRARY NAMES openblas
             HINTS ${PC_OPENBLAS_LIBDIR} ${PC_OPENBLAS_LIBRARY_DIRS}
             PATH_SUFFIXES openblas-pthread openblas-openmp)
set(OpenBLAS_VERSION ${PC_OPENBLAS_VERSION})
if(OpenBLAS_INCLUDE_DIR AND NOT EXISTS "${OpenBLAS_INCLUDE_DIR}/cblas.h")
  set(OpenBLAS_INCLUDE_DIR OpenBLAS_INCLUDE_DIR-NOTFOUND CACHE PATH "" FORCE)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS
  REQUIRED_VARS OpenBLAS_LIBRARY OpenBLAS_INCLUDE_DIR
  VERSION_VAR OpenBLAS_VERSION)
mark_as_advanced(OpenBLAS_INCLUDE_DIR OpenBLAS_LIBRARY)

if(OpenBLAS_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES
    IMPORTED_LOCATION "${OpenBLAS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIR}")
endif()
