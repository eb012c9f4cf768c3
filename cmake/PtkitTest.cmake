include(GoogleTest)

# ptkit_add_test(NAME SOURCES a.cc ... [LIBS lib ...] [LABELS label ...] [TIMEOUT seconds])
#
# The one way tests are registered: a gtest executable whose cases are discovered one by one,
# each with a timeout. Labels:
#   unit        pure logic, no privileges (default)
#   privileged  needs root / perf_event_open; skips with the reason when denied
#   hardware    needs intel_pt; skips with the reason where it is absent
#   slow        long-running; still part of the default run
function(ptkit_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  # Test code is compiled for speed of building, not of running: gtest/gmock code at -O2 -g
  # is most of the build's time (27 s of CPU for one test file; -Og -g1: 11.5 s, measured).
  # The code under test keeps the build type's flags; -g1 keeps line tables for backtraces.
  # Under clang's sanitizers -Og (= -O1) costs 2.6x the CPU of -O0 (decoder_container_test:
  # 44.8 s against 17.4 s, measured), so the sanitizer build compiles test code at -O0.
  if(PTKIT_FUZZ)
    target_compile_options(${name} PRIVATE -O0 -gline-tables-only)
  elseif(CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release)$")
    target_compile_options(${name} PRIVATE -Og -g1)
  endif()
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} ptkit_test_support GTest::gmock_main)
  target_compile_definitions(${name} PRIVATE
    PTKIT_SOURCE_DIR="${PROJECT_SOURCE_DIR}" PTKIT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()
