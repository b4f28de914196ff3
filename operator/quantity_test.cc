#include "operator/quantity.h"

#include <catch2/catch.hpp>

namespace sluice::op {
namespace {

TEST_CASE("quantities parse into millis", "[quantity]") {
  CHECK(*ParseQuantityMillis("500m") == 500);
  CHECK(*ParseQuantityMillis("2") == 2000);
  CHECK(*ParseQuantityMillis("1.5") == 1500);
  CHECK(*ParseQuantityMillis("0.1") == 100);
  CHECK(*ParseQuantityMillis("31500m") == 31500);
  CHECK(*ParseQuantityMillis("1Ki") == 1024000);
  CHECK(*ParseQuantityMillis("1Gi") == 1073741824000LL);
  CHECK(*ParseQuantityMillis("2k") == 2000000);
  CHECK(*ParseQuantityMillis("4e3") == 4000000);
  CHECK(*ParseQuantityMillis("1E-3") == 1);
  CHECK(*ParseQuantityMillis("+3") == 3000);
  CHECK(*ParseQuantityMillis(".5") == 500);
  // Rounded up, like Kubernetes' MilliValue.
  CHECK(*ParseQuantityMillis("1n") == 1);
  CHECK(*ParseQuantityMillis("0") == 0);
}

TEST_CASE("malformed quantities name the text", "[quantity]") {
  for (const char* bad : {"", "two", "1X", "1.2.3", "m", "1e", "1ex", "-1", "1Gib", "99999999999999999999Ei"}) {
    absl::StatusOr<int64_t> q = ParseQuantityMillis(bad);
    INFO(bad);
    REQUIRE_FALSE(q.ok());
    CHECK(q.status().message().find(std::string("\"") + bad + "\"") != std::string::npos);
  }
}

TEST_CASE("cpu amounts format like Kubernetes", "[quantity]") {
  CHECK(FormatCpuMillis(2000) == "2");
  CHECK(FormatCpuMillis(1500) == "1500m");
  CHECK(FormatCpuMillis(0) == "0");
}

}  // namespace
}  // namespace sluice::op
