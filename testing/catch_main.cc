// The one translation unit that compiles Catch2's main; every test binary links it.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
