#include "common/prometheus_text.h"

#include <cmath>
#include <random>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"

namespace sluice::promtext {
namespace {

TEST_CASE("ParsePrometheusText reads names, labels, escapes and special values") {
  const std::string text =
      "# HELP sluice_worker_elements_produced_total Elements produced.\n"
      "# TYPE sluice_worker_elements_produced_total counter\n"
      "sluice_worker_elements_produced_total{dataservice=\"\",placement=\"remote\",worker=\"127.0.0.1:5\"} 42\n"
      "sluice_dispatcher_jobs{dataservice=\"a \\\"q\\\" b\\\\c\"} 3 1700000000000\n"
      "plain_metric 1.5e3\n"
      "\n"
      "inf_metric{x=\"1\"} +Inf\n";
  auto samples = ParsePrometheusText(text);
  INFO(samples.status().ToString());
  REQUIRE(samples.ok());
  REQUIRE(samples->size() == 4);
  CHECK((*samples)[0].labels.at("worker") == "127.0.0.1:5");
  CHECK((*samples)[0].labels.at("dataservice").empty());
  CHECK((*samples)[0].value == 42);
  CHECK((*samples)[0].line == 3);
  CHECK(!(*samples)[0].timestamp_ms.has_value());
  CHECK((*samples)[1].labels.at("dataservice") == "a \"q\" b\\c");
  CHECK((*samples)[1].value == 3);
  CHECK((*samples)[1].timestamp_ms == 1700000000000);
  CHECK((*samples)[2].value == 1500);
  CHECK(std::isinf((*samples)[3].value));
  CHECK((*samples)[3].value > 0);
  CHECK(SumSamples(*samples, "sluice_worker_elements_produced_total", {{"placement", "remote"}}) == 42);
  CHECK(SumSamples(*samples, "sluice_worker_elements_produced_total", {{"placement", "local"}}) == 0);
  CHECK(CountSamples(*samples, "plain_metric") == 1);
  CHECK(CountSamples(*samples, "absent") == 0);
}

TEST_CASE("ParseMetricsPage keeps HELP and TYPE, with HELP escapes") {
  auto page = ParseMetricsPage(
      "# HELP a_total Line one\\nline two \\\\ done\n"
      "# TYPE a_total counter\n"
      "a_total 1\n"
      "# HELP g Kept: \\d+ and a lone \\\n"
      "# TYPE g gauge\n"
      "g -2.5\n"
      "# a plain comment: ignored, as is # TYPE-looking text inside it\n"
      "#HELP not_help either\n");
  INFO(page.status().ToString());
  REQUIRE(page.ok());
  REQUIRE(page->families.count("a_total") == 1);
  const MetricFamily& a = page->families.at("a_total");
  CHECK(a.help == "Line one\nline two \\ done");
  CHECK(a.type == MetricType::kCounter);
  CHECK(a.has_type);
  CHECK(page->families.at("g").type == MetricType::kGauge);
  CHECK(page->families.at("g").help == "Kept: \\d+ and a lone \\");  // prometheus-cpp does not escape HELP
  CHECK(page->families.count("not_help") == 0);
  CHECK(page->samples.size() == 2);
  CHECK(std::string(MetricTypeName(MetricType::kSummary)) == "summary");
}

TEST_CASE("Values (NaN, +Inf, -Inf, exponents), label value escapes, blanks, tabs, CRLF and a trailing comma") {
  auto page = ParseMetricsPage(
      "nan_metric NaN\n"
      "neg_inf -Inf\n"
      "also_inf Inf\n"
      "exp 1e-3\n"
      "neg -7\n"
      "escaped{v=\"line\\nbreak \\\"quoted\\\" back\\\\slash\"} 1\n"
      "  \tspaced  {  a = \"1\" , b=\"2\", }\t 5   123  \r\n"
      "unicode{v=\"grüße ✓\"} 2\n");
  INFO(page.status().ToString());
  REQUIRE(page.ok());
  const auto& s = page->samples;
  REQUIRE(s.size() == 8);
  CHECK(std::isnan(s[0].value));
  CHECK(std::isinf(s[1].value));
  CHECK(s[1].value < 0);
  CHECK(std::isinf(s[2].value));
  CHECK(s[3].value == Approx(0.001));
  CHECK(s[4].value == -7);
  CHECK(s[5].labels.at("v") == "line\nbreak \"quoted\" back\\slash");
  CHECK(s[6].name == "spaced");
  CHECK(s[6].labels.at("a") == "1");
  CHECK(s[6].labels.at("b") == "2");
  CHECK(s[6].value == 5);
  CHECK(s[6].timestamp_ms == 123);
  CHECK(s[7].labels.at("v") == "grüße ✓");
}

TEST_CASE("Histograms and summaries: suffixed series belong to their family") {
  auto page = ParseMetricsPage(
      "# TYPE latency histogram\n"
      "latency_bucket{le=\"0.1\"} 1\n"
      "latency_bucket{le=\"+Inf\"} 3\n"
      "latency_sum 0.7\n"
      "latency_count 3\n"
      "# TYPE rpc summary\n"
      "rpc{quantile=\"0.5\"} 0.2\n"
      "rpc_sum 4\n"
      "rpc_count 9\n");
  INFO(page.status().ToString());
  REQUIRE(page.ok());
  CHECK(page->samples.size() == 7);
  CHECK(SumSamples(page->samples, "latency_bucket") == 4);
  // A TYPE line after samples of that name is refused.
  auto late = ParseMetricsPage("latency_bucket{le=\"1\"} 1\n# TYPE latency_bucket histogram\n");
  REQUIRE(!late.ok());
  CHECK(absl::StrContains(late.status().message(), "comes after its samples"));
}

TEST_CASE("Malformed lines are rejected with the line number, what is wrong and the line") {
  struct Case {
    const char* text;
    int line;
    const char* says;
  };
  const Case cases[] = {
      {"m{a=\"1\" 3\n", 1, "expected ',' or '}'"},
      {"m{a=1} 3\n", 1, "must be quoted"},
      {"m{a=\"1} 3\n", 1, "no closing '\"'"},
      {"m{=\"1\"} 3\n", 1, "expected a label name"},
      {"ok 1\nm notanumber\n", 2, "is not a number"},
      {"{a=\"b\"} 1\n", 1, "must start with a metric name"},
      {"m{a=\"1\"\n", 1, "expected ',' or '}'"},
      {"m{a=\"1\",\n", 1, "no closing '}'"},
      {"m{a \"1\"} 2\n", 1, "has no '='"},
      {"m{a=\"x\\ty\"} 2\n", 1, "invalid escape"},
      {"m{a=\"1\",a=\"2\"} 2\n", 1, "appears twice"},
      {"m{__name__=\"x\"} 2\n", 1, "reserved"},
      {"m\n", 1, "has no value"},
      {"m{a=\"1\"}\n", 1, "has no value"},
      {"m 1 notatime\n", 1, "timestamp"},
      {"m 1 1.5\n", 1, "timestamp"},
      {"m 1 2 3\n", 1, "after the timestamp"},
      {"m-x 1\n", 1, "invalid character '-'"},
      {"m 0x10\n", 1, "is not a number"},
      {"m 1,5\n", 1, "is not a number"},
      {"9m 1\n", 1, "must start with a metric name"},
      {"a 1\na 2\n", 2, "duplicate series"},
      {"a{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} 2\n", 2, "first at line 1"},
      {"# TYPE a counter\n# TYPE a gauge\n", 2, "second TYPE"},
      {"# HELP a x\n# HELP a y\n", 2, "second HELP"},
      {"a 1\n# TYPE a counter\n", 2, "comes after its samples"},
      {"# TYPE a countr\n", 1, "is not one of counter, gauge"},
      {"# TYPE a counter extra\n", 1, "unexpected text after the type"},
      {"# TYPE\n", 1, "without a valid metric name"},
      {"# HELP 1abc text\n", 1, "without a valid metric name"},
      {"# TYPE h histogram\nh_bucket 1\n", 2, "no 'le' label"},
      {"# TYPE h histogram\nh_bucket{le=\"x\"} 1\n", 2, "is not a number"},
      {"# TYPE h histogram\nh 1\n", 2, "without a _bucket"},
      {"m{a=\"\xff\"} 1\n", 1, "not valid UTF-8"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto page = ParseMetricsPage(c.text);
    REQUIRE(!page.ok());
    CHECK(absl::IsInvalidArgument(page.status()));
    const std::string message(page.status().message());
    INFO(message);
    CHECK(absl::StrContains(message, "metrics text line " + std::to_string(c.line) + ": "));
    CHECK(absl::StrContains(message, c.says));
    CHECK(absl::StrContains(message, "(line: '"));
  }
}

TEST_CASE("An empty page, blank lines and comments only give no samples") {
  for (const char* text : {"", "\n\n", "# just a comment\n", "   \t\n"}) {
    auto page = ParseMetricsPage(text);
    INFO(page.status().ToString());
  REQUIRE(page.ok());
    CHECK(page->samples.empty());
  }
}

TEST_CASE("Arbitrary bytes never crash the parser: every input is parsed or rejected with a line number") {
  const std::string seed =
      "# HELP a_total Help \\\\ text\n# TYPE a_total counter\na_total{x=\"1\",y=\"q\\\"\\n\"} 12 1700\n"
      "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 3\nh_sum NaN\n";
  std::mt19937 rng(12345);
  const std::string alphabet = "{}=\",\\# \t\nabcxyz_:01.+-eInfNaN\r\xff";
  int rejected = 0;
  for (int round = 0; round < 5000; ++round) {
    std::string text = seed;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 1:
          if (at < text.size()) text.erase(at, 1);
          break;
        default:
          if (at < text.size()) text[at] = alphabet[rng() % alphabet.size()];
      }
    }
    auto page = ParseMetricsPage(text);
    if (!page.ok()) {
      ++rejected;
      REQUIRE(absl::StrContains(page.status().message(), "metrics text line "));
    }
  }
  CHECK(rejected > 0);  // the mutations do produce malformed pages
}

}  // namespace
}  // namespace sluice::promtext
