// The precompiled header of every test executable (cmake/sluice.cmake, SLUICE_TEST_PCH): Catch2 and
// the standard and Abseil headers nearly all tests include. Only headers that stay put: a header of
// this project here would rebuild every test whenever it changes.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
