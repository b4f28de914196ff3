#include "operator/quantity.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice::op {
namespace {

absl::Status Invalid(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid quantity \"", text, "\": ", why,
                   " (expected a number with an optional suffix such as 500m, 2, 1.5, 1Gi or 4e3)"));
}

// Multiplier of a suffix, or a negative value for an unknown suffix.
long double SuffixMultiplier(absl::string_view suffix) {
  struct Entry {
    absl::string_view name;
    long double value;
  };
  static constexpr Entry kSuffixes[] = {
      {"", 1.0L},           {"n", 1e-9L},         {"u", 1e-6L},         {"m", 1e-3L},
      {"k", 1e3L},          {"M", 1e6L},          {"G", 1e9L},          {"T", 1e12L},
      {"P", 1e15L},         {"E", 1e18L},         {"Ki", 1024.0L},      {"Mi", 1048576.0L},
      {"Gi", 1073741824.0L}, {"Ti", 1099511627776.0L}, {"Pi", 1125899906842624.0L},
      {"Ei", 1152921504606846976.0L},
  };
  for (const Entry& e : kSuffixes) {
    if (e.name == suffix) return e.value;
  }
  return -1.0L;
}

}  // namespace

absl::StatusOr<int64_t> ParseQuantityMillis(absl::string_view text) {
  if (text.empty()) return Invalid(text, "empty");
  size_t pos = 0;
  bool negative = false;
  if (text[pos] == '+' || text[pos] == '-') {
    negative = text[pos] == '-';
    ++pos;
  }
  // Mantissa: digits with at most one decimal point, at least one digit.
  long double mantissa = 0.0L;
  long double fraction_scale = 1.0L;
  bool seen_point = false;
  int digits = 0;
  for (; pos < text.size(); ++pos) {
    char c = text[pos];
    if (c >= '0' && c <= '9') {
      ++digits;
      if (seen_point) {
        fraction_scale /= 10.0L;
        mantissa += (c - '0') * fraction_scale;
      } else {
        mantissa = mantissa * 10.0L + (c - '0');
      }
    } else if (c == '.' && !seen_point) {
      seen_point = true;
    } else {
      break;
    }
  }
  if (digits == 0) return Invalid(text, "no digits");
  absl::string_view suffix = text.substr(pos);
  long double multiplier = 1.0L;
  if (!suffix.empty() && (suffix[0] == 'e' || suffix[0] == 'E') && suffix.size() > 1) {
    // Decimal exponent: e3, E-2, e+6.
    size_t epos = 1;
    bool eneg = false;
    if (suffix[epos] == '+' || suffix[epos] == '-') {
      eneg = suffix[epos] == '-';
      ++epos;
    }
    if (epos >= suffix.size()) return Invalid(text, "exponent has no digits");
    int exponent = 0;
    for (; epos < suffix.size(); ++epos) {
      char c = suffix[epos];
      if (c < '0' || c > '9') return Invalid(text, "exponent is not a whole number");
      exponent = exponent * 10 + (c - '0');
      if (exponent > 100) return Invalid(text, "exponent too large");
    }
    multiplier = std::pow(10.0L, eneg ? -exponent : exponent);
  } else {
    multiplier = SuffixMultiplier(suffix);
    if (multiplier < 0) return Invalid(text, absl::StrCat("unknown suffix \"", suffix, "\""));
  }
  if (negative && mantissa != 0.0L) return Invalid(text, "negative quantities are not allowed here");
  long double millis = std::ceil(mantissa * multiplier * 1000.0L - 1e-9L);
  if (millis > 9.2e18L) return Invalid(text, "too large");
  return static_cast<int64_t>(millis);
}

std::string FormatCpuMillis(int64_t millis) {
  if (millis % 1000 == 0) return absl::StrCat(millis / 1000);
  return absl::StrCat(millis, "m");
}

}  // namespace sluice::op
