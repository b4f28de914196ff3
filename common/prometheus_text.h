// Parser for the Prometheus text exposition format 0.0.4 (what every Sluice daemon serves on
// /metrics, and what the autoscaler reads when it scrapes the dispatcher and workers directly):
//
//   # HELP name docstring          (escapes \\ and \n; other backslashes are kept)
//   # TYPE name counter|gauge|histogram|summary|untyped
//   name{label="value",...} value [timestamp_ms]
//
// Strict where a wrong number would follow from leniency: metric and label names must match the
// format's character sets; label values must be quoted and may only escape \\, \" and \n; a
// label may appear once per sample; values are floats (NaN, +Inf and -Inf included); a timestamp
// is an integer; a metric has at most one HELP and one TYPE line, and its TYPE comes before its
// samples; the same series (name and label set) may appear only once. Other comment lines and
// blank lines are skipped. A malformed line gives InvalidArgument naming the line number, what is
// wrong and an excerpt of the line — never a crash, whatever the input.
//
// Pure functions, no I/O; thread-safe.
#ifndef SLUICE_COMMON_PROMETHEUS_TEXT_H_
#define SLUICE_COMMON_PROMETHEUS_TEXT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::promtext {

struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
  std::optional<int64_t> timestamp_ms;  // the optional third field
  int line = 0;                         // 1-based line number in the page
};

enum class MetricType { kUntyped, kCounter, kGauge, kHistogram, kSummary };
const char* MetricTypeName(MetricType type);  // "counter", ...

// What the HELP and TYPE lines say about one metric family.
struct MetricFamily {
  std::string name;
  MetricType type = MetricType::kUntyped;
  std::string help;
  bool has_type = false;
  bool has_help = false;
};

struct MetricsPage {
  std::vector<MetricSample> samples;            // in page order
  std::map<std::string, MetricFamily> families;  // by family name (from HELP and TYPE lines)
};

// Parses a whole page. Errors: InvalidArgument "metrics text line N: <what> (line: '<excerpt>')".
absl::StatusOr<MetricsPage> ParseMetricsPage(absl::string_view text);

// The samples of ParseMetricsPage.
absl::StatusOr<std::vector<MetricSample>> ParsePrometheusText(absl::string_view text);

// Sum of the samples named `name` whose labels include every pair of `match` (0 when none).
double SumSamples(const std::vector<MetricSample>& samples, absl::string_view name,
                  const std::map<std::string, std::string>& match = {});
// Number of samples named `name` (matching `match`).
int CountSamples(const std::vector<MetricSample>& samples, absl::string_view name,
                 const std::map<std::string, std::string>& match = {});

}  // namespace sluice::promtext

#endif  // SLUICE_COMMON_PROMETHEUS_TEXT_H_
