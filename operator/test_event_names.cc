#include "operator/test_event_names.h"

#include <catch2/catch.hpp>
#include <cctype>
#include <cstdint>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice::op::testing {

std::set<std::string> NamesIn(const std::string& note, const std::string& prefix) {
  std::set<std::string> out;
  for (size_t at = note.find(prefix); at != std::string::npos; at = note.find(prefix, at + 1)) {
    size_t pos = at + prefix.size();
    if (pos < note.size() && note[pos] == '[') {
      size_t close = note.find(']', pos);
      REQUIRE(close != std::string::npos);
      for (absl::string_view part : absl::StrSplit(note.substr(pos + 1, close - pos - 1), ',')) {
        std::vector<std::string> bounds = absl::StrSplit(part, '-');
        int64_t lo = 0, hi = 0;
        REQUIRE(absl::SimpleAtoi(bounds[0], &lo));
        REQUIRE(absl::SimpleAtoi(bounds.back(), &hi));
        for (int64_t n = lo; n <= hi; ++n) out.insert(absl::StrCat(prefix, n));
      }
    } else {
      size_t end = pos;
      while (end < note.size() && std::isdigit(static_cast<unsigned char>(note[end]))) ++end;
      if (end > pos) out.insert(note.substr(at, end - at));
    }
  }
  return out;
}

}  // namespace sluice::op::testing
