include(GoogleTest)

# ptkit_add_test(NAME SOURCES a.cc ... [LIBS lib ...] [LABELS label ...] [TIMEOUT seconds]
#                [DEPENDS target ...] [DEFINITIONS NAME=VALUE ...] [INCLUDES dir ...]
#                [GROUP group] [COST seconds])
#
# The one way tests are registered: a gtest executable whose cases are discovered one by one,
# each with a timeout. Labels:
#   unit        pure logic, no privileges (default)
#   privileged  needs root / perf_event_open; skips with the reason when denied
#   hardware    needs intel_pt; skips with the reason where it is absent
#   slow        long-running; still part of the default run
#
# GROUP: with PTKIT_TEST_GROUPS on (the ci and fuzz presets), the tests of one group are compiled into one
# executable named after the group, in unity batches: gtest, gmock, json and fmt code is then
# parsed and generated once per batch instead of once per test file, and linked once per group
# (6 test files: 12.2 s of CPU in one batch against 30.6 s one by one, measured). The case names
# ctest runs are the same either way. The tests of a group share LABELS, TIMEOUT and COST (checked),
# and their DEPENDS, DEFINITIONS and INCLUDES are merged, so a group's tests must agree on the
# value of every definition they share (a differing value is a redefinition: -Werror stops it).
# The sanitizer step of scripts/test.sh builds groups in the fuzz preset for the same reason.
# Without PTKIT_TEST_GROUPS (the default and debug-asan presets) every test is its own
# executable, so an incremental build recompiles one test file.
# COST: ctest's COST of every case (its expected seconds). A parallel ctest starts the costliest
# tests first; without a previous run's timings (a fresh build, as in CI) it goes in test order,
# and a few long cases registered last ran alone at the end of the run (the sanitizer run's
# hostile-input loops: 20-50 s each, the other core idle).
function(ptkit_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;GROUP;COST"
                        "SOURCES;LIBS;LABELS;DEPENDS;DEFINITIONS;INCLUDES" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "ptkit_add_test(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(NOT ARG_COST)
    set(ARG_COST 0)
  endif()
  # The sanitizer build (fuzz preset: ASan, UBSan and coverage instrumentation) runs the same
  # cases 3-4 times slower: DecoderHostileTest.LoopThroughADirectBranchInARawImageIsAnError
  # took 77 s under load against its 30 s, and passes given the time. A hang still fails.
  if(PTKIT_FUZZ)
    math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * 3")
  endif()
  set(target ${name})
  if(ARG_GROUP AND PTKIT_TEST_GROUPS)
    set(target ${ARG_GROUP})
  endif()
  if(TARGET ${target})
    get_target_property(labels ${target} PTKIT_TEST_LABELS)
    get_target_property(timeout ${target} PTKIT_TEST_TIMEOUT)
    get_target_property(cost ${target} PTKIT_TEST_COST)
    if(NOT "${labels}" STREQUAL "${ARG_LABELS}" OR NOT timeout EQUAL ARG_TIMEOUT
       OR NOT cost EQUAL ARG_COST)
      message(FATAL_ERROR "ptkit_add_test(${name}): group ${target} has LABELS ${labels}, "
                          "TIMEOUT ${timeout} and COST ${cost}; this test asks ${ARG_LABELS}, "
                          "${ARG_TIMEOUT} and ${ARG_COST}")
    endif()
    target_sources(${target} PRIVATE ${ARG_SOURCES})
  else()
    add_executable(${target} ${ARG_SOURCES})
    set_target_properties(${target} PROPERTIES PTKIT_TEST_LABELS "${ARG_LABELS}"
                                               PTKIT_TEST_TIMEOUT ${ARG_TIMEOUT}
                                               PTKIT_TEST_COST ${ARG_COST})
    if(target STREQUAL ARG_GROUP)
      set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
    endif()
    # Test code is compiled for speed of building, not of running: gtest/gmock code at -O2 -g
    # is most of the build's time (27 s of CPU for one test file; -Og -g1: 11.5 s, measured).
    # The code under test keeps the build type's flags; -g1 keeps line tables for backtraces.
    # Under clang's sanitizers -Og (= -O1) costs 2.6x the CPU of -O0 (decoder_container_test:
    # 44.8 s against 17.4 s, measured), so the sanitizer build compiles test code at -O0.
    if(PTKIT_FUZZ)
      target_compile_options(${target} PRIVATE -O0 -gline-tables-only)
    elseif(CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release)$")
      target_compile_options(${target} PRIVATE -Og -g1)
    endif()
    target_link_libraries(${target} PRIVATE ptkit_test_support GTest::gmock_main)
    target_compile_definitions(${target} PRIVATE
      PTKIT_SOURCE_DIR="${PROJECT_SOURCE_DIR}" PTKIT_BINARY_DIR="${PROJECT_BINARY_DIR}")
    gtest_discover_tests(${target}
      DISCOVERY_TIMEOUT 60
      PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}" COST ${ARG_COST})
  endif()
  if(ARG_LIBS)
    target_link_libraries(${target} PRIVATE ${ARG_LIBS})
  endif()
  if(ARG_DEPENDS)
    add_dependencies(${target} ${ARG_DEPENDS})
  endif()
  if(ARG_DEFINITIONS)
    target_compile_definitions(${target} PRIVATE ${ARG_DEFINITIONS})
  endif()
  if(ARG_INCLUDES)
    target_include_directories(${target} PRIVATE ${ARG_INCLUDES})
  endif()
endfunction()
