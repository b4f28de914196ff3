#include "common/prometheus_text.h"

#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sluice::promtext {
namespace {

constexpr size_t kExcerptChars = 80;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsNameStart(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || absl::ascii_isdigit(static_cast<unsigned char>(c)); }
bool IsLabelStart(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsLabelChar(char c) { return IsLabelStart(c) || absl::ascii_isdigit(static_cast<unsigned char>(c)); }

// True if `s` is well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= static_cast<size_t>(extra)) return false;  // truncated sequence
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(extra) + 1;
  }
  return true;
}

std::string Excerpt(absl::string_view line) {
  std::string out = absl::CHexEscape(line.substr(0, kExcerptChars));
  if (line.size() > kExcerptChars) out += "...";
  return out;
}

// A float as the format writes it: decimal notation, or NaN / +Inf / -Inf (Go's ParseFloat, which
// Prometheus uses, also takes "Inf", "inf" and "infinity"; so do we). No hex, no spaces.
bool ParseFloatValue(absl::string_view text, double* value) {
  if (text.empty()) return false;
  std::string lower = absl::AsciiStrToLower(text);
  absl::string_view body = lower;
  bool negative = false;
  if (body[0] == '+' || body[0] == '-') {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") {
    *value = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return true;
  }
  if (body == "nan") {
    *value = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  for (char c : body) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != '+' && c != '-') return false;
  }
  if (body.empty() || !(absl::ascii_isdigit(static_cast<unsigned char>(body[0])) || body[0] == '.')) return false;
  return absl::SimpleAtod(text, value);
}

// Reads one line; every error names the line.
class LineParser {
 public:
  LineParser(absl::string_view line, int number) : line_(line), number_(number) {}

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics text line ", number_, ": ", what, " (line: '", Excerpt(line_), "')"));
  }

  void SkipBlanks() {
    while (pos_ < line_.size() && IsBlank(line_[pos_])) ++pos_;
  }
  bool AtEnd() const { return pos_ >= line_.size(); }
  char Peek() const { return AtEnd() ? '\0' : line_[pos_]; }
  void Advance() { ++pos_; }
  // The characters up to the next blank (or the end).
  absl::string_view Token() {
    const size_t start = pos_;
    while (pos_ < line_.size() && !IsBlank(line_[pos_])) ++pos_;
    return line_.substr(start, pos_ - start);
  }
  absl::string_view Rest() {
    absl::string_view rest = line_.substr(std::min(pos_, line_.size()));
    pos_ = line_.size();
    return rest;
  }
  absl::string_view MetricName() {
    const size_t start = pos_;
    if (pos_ < line_.size() && IsNameStart(line_[pos_])) {
      ++pos_;
      while (pos_ < line_.size() && IsNameChar(line_[pos_])) ++pos_;
    }
    return line_.substr(start, pos_ - start);
  }
  absl::string_view LabelName() {
    const size_t start = pos_;
    if (pos_ < line_.size() && IsLabelStart(line_[pos_])) {
      ++pos_;
      while (pos_ < line_.size() && IsLabelChar(line_[pos_])) ++pos_;
    }
    return line_.substr(start, pos_ - start);
  }
  // A quoted label value; pos_ is at the opening quote.
  absl::StatusOr<std::string> QuotedValue(absl::string_view label) {
    ++pos_;  // the opening quote
    std::string value;
    while (pos_ < line_.size()) {
      const char c = line_[pos_++];
      if (c == '"') {
        if (!IsValidUtf8(value)) return Error(absl::StrCat("label '", label, "': the value is not valid UTF-8"));
        return value;
      }
      if (c != '\\') {
        value.push_back(c);
        continue;
      }
      if (pos_ >= line_.size()) break;
      const char e = line_[pos_++];
      if (e == '\\' || e == '"') {
        value.push_back(e);
      } else if (e == 'n') {
        value.push_back('\n');
      } else {
        return Error(absl::StrCat("label '", label, "': invalid escape '\\", absl::CHexEscape(std::string(1, e)),
                                  "' in its value (only \\\\, \\\" and \\n are allowed)"));
      }
    }
    return Error(absl::StrCat("label '", label, "': the value has no closing '\"'"));
  }

 private:
  absl::string_view line_;
  int number_;
  size_t pos_ = 0;
};

// HELP text: \\ and \n are unescaped. Any other backslash is kept as it is: prometheus-cpp (which
// serves our own pages) writes HELP text without escaping it, and a docstring changes no number.
std::string UnescapeHelp(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == '\\' || text[i + 1] == 'n')) {
      out.push_back(text[++i] == 'n' ? '\n' : '\\');
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

std::optional<MetricType> ParseType(absl::string_view text) {
  if (text == "counter") return MetricType::kCounter;
  if (text == "gauge") return MetricType::kGauge;
  if (text == "histogram") return MetricType::kHistogram;
  if (text == "summary") return MetricType::kSummary;
  if (text == "untyped") return MetricType::kUntyped;
  return std::nullopt;
}

std::string SeriesKey(const MetricSample& s) {
  std::string key = s.name;
  key.push_back('{');
  for (const auto& [k, v] : s.labels) absl::StrAppend(&key, k, "=\"", absl::CHexEscape(v), "\",");
  key.push_back('}');
  return key;
}

// The family a sample belongs to: its own name, or for histogram/summary series the name without
// the _bucket/_sum/_count suffix when that family was declared with such a TYPE.
std::string FamilyOf(const std::string& name, const std::map<std::string, MetricFamily>& families) {
  if (families.count(name)) return name;
  for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (!absl::EndsWith(name, suffix)) continue;
    const std::string base = name.substr(0, name.size() - suffix.size());
    auto it = families.find(base);
    if (it == families.end()) continue;
    if (it->second.type == MetricType::kHistogram) return base;
    if (it->second.type == MetricType::kSummary && suffix != "_bucket") return base;
  }
  return name;
}

bool Matches(const MetricSample& s, absl::string_view name, const std::map<std::string, std::string>& match) {
  if (s.name != name) return false;
  for (const auto& [k, v] : match) {
    auto it = s.labels.find(k);
    if (it == s.labels.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kUntyped: return "untyped";
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
    case MetricType::kSummary: return "summary";
  }
  return "untyped";
}

absl::StatusOr<MetricsPage> ParseMetricsPage(absl::string_view text) {
  MetricsPage page;
  std::map<std::string, int> series_lines;   // series key -> line of its first sample
  std::set<std::string> families_with_samples;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // tolerate CRLF line ends
    LineParser p(line, number);
    p.SkipBlanks();
    if (p.AtEnd()) continue;

    if (p.Peek() == '#') {
      p.Token();  // "#" (or a "#word" comment)
      p.SkipBlanks();
      const absl::string_view keyword = p.Token();
      if (keyword != "HELP" && keyword != "TYPE") continue;  // a plain comment
      p.SkipBlanks();
      const std::string name(p.MetricName());
      if (name.empty()) return p.Error(absl::StrCat(keyword, " line without a valid metric name"));
      if (!p.AtEnd() && !IsBlank(p.Peek())) {
        return p.Error(absl::StrCat(keyword, " line: invalid character '", absl::CHexEscape(std::string(1, p.Peek())),
                                    "' in the metric name"));
      }
      p.SkipBlanks();
      MetricFamily& family = page.families[name];
      family.name = name;
      if (keyword == "HELP") {
        if (family.has_help) return p.Error(absl::StrCat("second HELP line for metric '", name, "'"));
        family.help = UnescapeHelp(p.Rest());
        family.has_help = true;
      } else {
        if (family.has_type) return p.Error(absl::StrCat("second TYPE line for metric '", name, "'"));
        if (families_with_samples.count(name)) {
          return p.Error(absl::StrCat("TYPE line for metric '", name, "' comes after its samples (it must come first)"));
        }
        const absl::string_view type_text = p.Token();
        p.SkipBlanks();
        if (!p.AtEnd()) return p.Error("TYPE line: unexpected text after the type");
        std::optional<MetricType> type = ParseType(type_text);
        if (!type) {
          return p.Error(absl::StrCat("TYPE '", type_text,
                                      "' is not one of counter, gauge, histogram, summary, untyped"));
        }
        family.type = *type;
        family.has_type = true;
      }
      continue;
    }

    MetricSample sample;
    sample.line = number;
    sample.name = std::string(p.MetricName());
    if (sample.name.empty()) {
      return p.Error(absl::StrCat("a sample must start with a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), not '",
                                  absl::CHexEscape(std::string(1, p.Peek())), "'"));
    }
    const bool blank_after_name = IsBlank(p.Peek());
    p.SkipBlanks();  // the format allows blanks between the name and its label set
    if (p.Peek() == '{') {
      p.Advance();
      while (true) {
        p.SkipBlanks();
        if (p.AtEnd()) return p.Error("the label set has no closing '}'");
        if (p.Peek() == '}') {
          p.Advance();
          break;
        }
        const std::string label(p.LabelName());
        if (label.empty()) {
          return p.Error(absl::StrCat("expected a label name ([a-zA-Z_][a-zA-Z0-9_]*) or '}', found '",
                                      absl::CHexEscape(std::string(1, p.Peek())), "'"));
        }
        if (label == "__name__") return p.Error("label name '__name__' is reserved");
        p.SkipBlanks();
        if (p.Peek() != '=') return p.Error(absl::StrCat("label '", label, "' has no '='"));
        p.Advance();
        p.SkipBlanks();
        if (p.Peek() != '"') return p.Error(absl::StrCat("label '", label, "': the value must be quoted with '\"'"));
        auto value = p.QuotedValue(label);
        if (!value.ok()) return value.status();
        if (!sample.labels.emplace(label, *std::move(value)).second) {
          return p.Error(absl::StrCat("label '", label, "' appears twice"));
        }
        p.SkipBlanks();
        if (p.Peek() == ',') {
          p.Advance();  // a trailing comma before '}' is allowed
        } else if (p.Peek() != '}') {
          return p.Error(absl::StrCat("expected ',' or '}' after label '", label, "'"));
        }
      }
    } else if (!p.AtEnd() && !blank_after_name) {
      return p.Error(absl::StrCat("invalid character '", absl::CHexEscape(std::string(1, p.Peek())),
                                  "' after the metric name (names are [a-zA-Z_:][a-zA-Z0-9_:]*)"));
    }
    p.SkipBlanks();
    const absl::string_view value_text = p.Token();
    if (value_text.empty()) return p.Error(absl::StrCat("sample of '", sample.name, "' has no value"));
    if (!ParseFloatValue(value_text, &sample.value)) {
      return p.Error(absl::StrCat("value '", absl::CHexEscape(value_text),
                                  "' is not a number (a float, NaN, +Inf or -Inf)"));
    }
    p.SkipBlanks();
    if (!p.AtEnd()) {
      const absl::string_view ts_text = p.Token();
      int64_t ts = 0;
      if (!absl::SimpleAtoi(ts_text, &ts)) {
        return p.Error(absl::StrCat("timestamp '", absl::CHexEscape(ts_text),
                                    "' is not an integer (milliseconds since the epoch)"));
      }
      sample.timestamp_ms = ts;
      p.SkipBlanks();
      if (!p.AtEnd()) return p.Error("unexpected text after the timestamp");
    }

    const std::string family_name = FamilyOf(sample.name, page.families);
    auto family = page.families.find(family_name);
    if (family != page.families.end() && family->second.has_type) {
      const MetricType type = family->second.type;
      if (type == MetricType::kHistogram && sample.name == family_name + "_bucket") {
        auto le = sample.labels.find("le");
        double bound = 0;
        if (le == sample.labels.end()) return p.Error(absl::StrCat("histogram bucket '", sample.name, "' has no 'le' label"));
        if (!ParseFloatValue(le->second, &bound)) {
          return p.Error(absl::StrCat("histogram bucket '", sample.name, "': le=\"", absl::CHexEscape(le->second),
                                      "\" is not a number"));
        }
      } else if (type == MetricType::kHistogram && sample.name == family_name) {
        return p.Error(absl::StrCat("histogram '", family_name, "' has a sample without a _bucket, _sum or _count suffix"));
      }
    }
    families_with_samples.insert(family_name);
    const std::string key = SeriesKey(sample);
    auto [first, inserted] = series_lines.emplace(key, number);
    if (!inserted) {
      return p.Error(absl::StrCat("duplicate series '", sample.name, "' with the same labels (first at line ",
                                  first->second, ")"));
    }
    page.samples.push_back(std::move(sample));
  }
  return page;
}

absl::StatusOr<std::vector<MetricSample>> ParsePrometheusText(absl::string_view text) {
  auto page = ParseMetricsPage(text);
  if (!page.ok()) return page.status();
  return std::move(page->samples);
}

double SumSamples(const std::vector<MetricSample>& samples, absl::string_view name,
                  const std::map<std::string, std::string>& match) {
  double sum = 0;
  for (const auto& s : samples) {
    if (Matches(s, name, match)) sum += s.value;
  }
  return sum;
}

int CountSamples(const std::vector<MetricSample>& samples, absl::string_view name,
                 const std::map<std::string, std::string>& match) {
  int n = 0;
  for (const auto& s : samples) n += Matches(s, name, match) ? 1 : 0;
  return n;
}

}  // namespace sluice::promtext
