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
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} ptkit_test_support GTest::gmock_main)
  target_compile_definitions(${name} PRIVATE
    PTKIT_SOURCE_DIR="${PROJECT_SOURCE_DIR}" PTKIT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()
