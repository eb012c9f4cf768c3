# Every dependency comes from a Debian 12 package (scripts/install-deps.sh installs them).
# Packages with CMake config files are found with find_package; the others (libipt, libpfm4,
# libelf, libdw, xxhash, libiberty) through pkg-config or find_library, wrapped in ptkit:: imported targets.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(zstd CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(zydis CONFIG REQUIRED)
find_package(ZLIB REQUIRED)  # crc32: .gnu_debuglink's check of a separate debug file
find_package(LibLZMA REQUIRED)  # MiniDebugInfo: the xz-compressed ELF in .gnu_debugdata

pkg_check_modules(LIBELF REQUIRED IMPORTED_TARGET libelf)
pkg_check_modules(LIBDW REQUIRED IMPORTED_TARGET libdw)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
add_library(ptkit::elf ALIAS PkgConfig::LIBELF)
add_library(ptkit::dw ALIAS PkgConfig::LIBDW)
add_library(ptkit::xxhash ALIAS PkgConfig::XXHASH)

# libipt-dev, libpfm4-dev and libiberty-dev ship neither a .pc file nor a CMake config.
function(ptkit_find_plain_library target header lib package)
  find_path(${target}_INCLUDE_DIR ${header})
  find_library(${target}_LIBRARY ${lib})
  if(NOT ${target}_INCLUDE_DIR OR NOT ${target}_LIBRARY)
    message(FATAL_ERROR "${header} / lib${lib} not found: install ${package} "
                        "(scripts/install-deps.sh does)")
  endif()
  add_library(ptkit::${target} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(ptkit::${target} PROPERTIES
    IMPORTED_LOCATION "${${target}_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${${target}_INCLUDE_DIR}")
endfunction()
ptkit_find_plain_library(ipt intel-pt.h ipt libipt-dev)
ptkit_find_plain_library(pfm perfmon/pfmlib_perf_event.h pfm libpfm4-dev)
ptkit_find_plain_library(iberty libiberty/demangle.h iberty libiberty-dev)

if(PTKIT_BUILD_TESTS OR PTKIT_FUZZ)
  find_package(GTest CONFIG REQUIRED)
endif()
if(PTKIT_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)
endif()
