# ptkit_without_sanitizers(TARGET...): takes every -fsanitize* flag (the PTKIT_SANITIZE and
# PTKIT_FUZZ builds' global flags) out of each TARGET's compile and link options. For the
# programs that get traced and for what is loaded into an uninstrumented process: a static
# binary cannot link the sanitizer runtimes, and instrumentation would change what runs.
# Call it after the target's own options are set.
function(ptkit_without_sanitizers)
  foreach(target ${ARGN})
    foreach(property COMPILE_OPTIONS LINK_OPTIONS)
      get_target_property(options ${target} ${property})
      if(options)
        list(FILTER options EXCLUDE REGEX "sanitize")
        set_target_properties(${target} PROPERTIES ${property} "${options}")
      endif()
    endforeach()
  endforeach()
endfunction()
