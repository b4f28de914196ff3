// Reading typed fields out of nlohmann::json objects with field-path error reporting. FieldReader
// collects every problem (path + message) instead of stopping at the first, and never throws.
// Not thread-safe: one reader per parse.
#ifndef SLUICE_OPERATOR_JSON_FIELDS_H_
#define SLUICE_OPERATOR_JSON_FIELDS_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace sluice::op {

// One problem found in an object: the field path ("spec.workers.replicas") and what is wrong.
struct FieldError {
  std::string field;
  std::string message;
};

// "spec.a: msg; spec.b: msg".
std::string FormatFieldErrors(const std::vector<FieldError>& errors);

// "parent.key" (or "key" when parent is empty) and "parent[i]".
std::string JoinPath(const std::string& parent, absl::string_view key);
std::string IndexPath(const std::string& parent, size_t index);

class FieldReader {
 public:
  using json = nlohmann::json;

  void Error(std::string path, std::string message);
  const std::vector<FieldError>& errors() const { return errors_; }
  bool ok() const { return errors_.empty(); }

  // The member `key` of `object`, or nullptr when `object` is not an object or the member is
  // absent or null (the API server treats null like absent and applies defaults).
  static const json* Member(const json& object, absl::string_view key);

  // Each reader looks up parent[key] (path names parent). Absent or null: returns false/nullptr and,
  // if `required`, records "required value". Wrong type: records an error and returns false/nullptr.
  const json* Object(const json& parent, const std::string& path, absl::string_view key,
                     bool required = false);
  const json* Array(const json& parent, const std::string& path, absl::string_view key,
                    bool required = false);
  bool String(const json& parent, const std::string& path, absl::string_view key, std::string* out,
              bool required = false);
  bool Int(const json& parent, const std::string& path, absl::string_view key, int64_t* out,
           bool required = false);
  bool Number(const json& parent, const std::string& path, absl::string_view key, double* out);
  bool Bool(const json& parent, const std::string& path, absl::string_view key, bool* out);
  // A string that must be one of `allowed`.
  bool Enum(const json& parent, const std::string& path, absl::string_view key,
            std::initializer_list<absl::string_view> allowed, std::string* out);
  // An object whose values are all strings.
  bool StringMap(const json& parent, const std::string& path, absl::string_view key,
                 std::map<std::string, std::string>* out);
  // An array whose items are all strings.
  bool StringList(const json& parent, const std::string& path, absl::string_view key,
                  std::vector<std::string>* out);
  // A quantity written as a string or an integer, checked to parse; stored as text.
  bool Quantity(const json& parent, const std::string& path, absl::string_view key, std::string* out);
  // An RFC 3339 timestamp string.
  bool Timestamp(const json& parent, const std::string& path, absl::string_view key, absl::Time* out);

 private:
  std::vector<FieldError> errors_;
};

// JSON type name for messages ("string", "integer", "object", ...).
std::string JsonTypeName(const nlohmann::json& value);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_JSON_FIELDS_H_
