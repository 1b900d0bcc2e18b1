# FindXXHash: the xxHash library (libxxhash), which checkpoint/checksum.cc uses for the
# XXH3-64 checksums of checkpoint files.
#
# Provides the imported target XXHash::xxhash and XXHash_FOUND. pkg-config's libxxhash.pc
# (Debian's libxxhash-dev ships one) gives the search hints; without pkg-config the
# header and library are looked for in the usual places. etr installs this file beside
# etrConfig.cmake, so that a program linking the installed static libetr_runtime.a and
# libetr_checkpoint.a finds the same library again.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_XXHASH QUIET libxxhash)
endif()

find_path(XXHash_INCLUDE_DIR xxhash.h HINTS ${PC_XXHASH_INCLUDEDIR} ${PC_XXHASH_INCLUDE_DIRS})
find_library(XXHash_LIBRARY NAMES xxhash HINTS ${PC_XXHASH_LIBDIR} ${PC_XXHASH_LIBRARY_DIRS})
set(XXHash_VERSION ${PC_XXHASH_VERSION})

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(XXHash
  REQUIRED_VARS XXHash_LIBRARY XXHash_INCLUDE_DIR
  VERSION_VAR XXHash_VERSION)
mark_as_advanced(XXHash_INCLUDE_DIR XXHash_LIBRARY)

if(XXHash_FOUND AND NOT TARGET XXHash::xxhash)
  add_library(XXHash::xxhash UNKNOWN IMPORTED)
  set_target_properties(XXHash::xxhash PROPERTIES
    IMPORTED_LOCATION "${XXHash_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${XXHash_INCLUDE_DIR}")
endif()
