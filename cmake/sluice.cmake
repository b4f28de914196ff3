# Helpers shared by every component's CMakeLists.txt.

# Compile time of the test binaries (CI builds everything cold on 2 cores): a test executable's own
# sources are compiled with SLUICE_TEST_COMPILE_OPTIONS (default -O0: the code under test lives in
# the libraries, which keep the build type's flags; a test's own code at -O0 compiles in about half
# the time) and with a precompiled header of Catch2 and the headers nearly every test includes
# (testing/test_pch.h, built once by the target sluice_test_pch and reused by every test).
set(SLUICE_TEST_COMPILE_OPTIONS "-O0" CACHE STRING
  "Compile options of the test executables' own sources (after the build type's; empty: as the libraries)")
# Off by default under ccache, which cannot cache a compile that reads a precompiled header (unless its
# sloppiness says pch_defines,time_macros): a developer's fresh build tree then still hits the cache.
set(_sluice_test_pch_default ON)
if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
  set(_sluice_test_pch_default OFF)
endif()
option(SLUICE_TEST_PCH "Precompile testing/test_pch.h once and reuse it in every test executable"
  ${_sluice_test_pch_default})

# sluice_test(NAME SOURCES... [LIBS ...] [PROPERTIES name value ...]) builds a Catch2 test binary
# linked with the shared Catch2 main and registers its test cases with ctest, each with the
# PROPERTIES given (e.g. TIMEOUT 120, COST 60).
function(sluice_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;PROPERTIES" ${ARGN})
  add_executable(${name} ${T_SOURCES} ${T_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE sluice_catch_main ${T_LIBS})
  target_compile_options(${name} PRIVATE ${SLUICE_TEST_COMPILE_OPTIONS})
  if(SLUICE_TEST_PCH)
    # -pthread (it defines _REENTRANT, which the headers test) on every test, as on the header: only
    # the tests linking gRPC get it otherwise, and GCC ignores a header compiled with other macros.
    target_compile_options(${name} PRIVATE -pthread)
    target_precompile_headers(${name} REUSE_FROM sluice_test_pch)
  endif()
  # catch_discover_tests hands PROPERTIES to a script as one flat list: a value holding ';' (a list)
  # would be cut into pieces and shift every property after it (ENVIRONMENT with two variables lost
  # the second variable and every property given here, TIMEOUT included). So each value is a
  # single element: ENVIRONMENT sets one variable, ENVIRONMENT_MODIFICATION the other.
  # --warn NoTests: a name Catch cannot match (ctest cuts names at ';') fails instead of passing empty.
  catch_discover_tests(${name}
    TEST_PREFIX "${name}:"
    EXTRA_ARGS --warn NoTests
    PROPERTIES ENVIRONMENT "SLUICE_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
               ENVIRONMENT_MODIFICATION "SLUICE_BINARY_DIR=set:${PROJECT_BINARY_DIR}"
               ${T_PROPERTIES})
endfunction()
