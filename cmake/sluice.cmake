# Helpers shared by every component's CMakeLists.txt.

# sluice_test(NAME SOURCES... [LIBS ...]) builds a Catch2 test binary linked with the
# shared Catch2 main and registers its test cases with ctest.
function(sluice_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;PROPERTIES" ${ARGN})
  add_executable(${name} ${T_SOURCES} ${T_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE sluice_catch_main ${T_LIBS})
  # --warn NoTests: a name Catch cannot match (ctest cuts names at ';') fails instead of passing empty.
  catch_discover_tests(${name}
    TEST_PREFIX "${name}:"
    EXTRA_ARGS --warn NoTests
    PROPERTIES ENVIRONMENT "SLUICE_SOURCE_DIR=${PROJECT_SOURCE_DIR};SLUICE_BINARY_DIR=${PROJECT_BINARY_DIR}" ${T_PROPERTIES})
endfunction()
