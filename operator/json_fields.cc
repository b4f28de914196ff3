#include "operator/json_fields.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/quantity.h"

namespace sluice::op {

std::string FormatFieldErrors(const std::vector<FieldError>& errors) {
  return absl::StrJoin(errors, "; ", [](std::string* out, const FieldError& e) {
    absl::StrAppend(out, e.field, ": ", e.message);
  });
}

std::string JoinPath(const std::string& parent, absl::string_view key) {
  if (parent.empty()) return std::string(key);
  return absl::StrCat(parent, ".", key);
}

std::string IndexPath(const std::string& parent, size_t index) {
  return absl::StrCat(parent, "[", index, "]");
}

std::string JsonTypeName(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  if (value.is_boolean()) return "boolean";
  if (value.is_string()) return "string";
  if (value.is_array()) return "array";
  if (value.is_object()) return "object";
  if (value.is_null()) return "null";
  return "unknown";
}

void FieldReader::Error(std::string path, std::string message) {
  errors_.push_back(FieldError{std::move(path), std::move(message)});
}

const nlohmann::json* FieldReader::Member(const json& object, absl::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {

std::string WrongType(absl::string_view expected, const nlohmann::json& got) {
  return absl::StrCat("must be ", expected, ", got ", JsonTypeName(got));
}

}  // namespace

const nlohmann::json* FieldReader::Object(const json& parent, const std::string& path,
                                          absl::string_view key, bool required) {
  const json* v = Member(parent, key);
  std::string field = JoinPath(path, key);
  if (v == nullptr) {
    if (required) Error(field, "required value");
    return nullptr;
  }
  if (!v->is_object()) {
    Error(field, WrongType("an object", *v));
    return nullptr;
  }
  return v;
}

const nlohmann::json* FieldReader::Array(const json& parent, const std::string& path,
                                         absl::string_view key, bool required) {
  const json* v = Member(parent, key);
  std::string field = JoinPath(path, key);
  if (v == nullptr) {
    if (required) Error(field, "required value");
    return nullptr;
  }
  if (!v->is_array()) {
    Error(field, WrongType("an array", *v));
    return nullptr;
  }
  return v;
}

bool FieldReader::String(const json& parent, const std::string& path, absl::string_view key,
                         std::string* out, bool required) {
  const json* v = Member(parent, key);
  std::string field = JoinPath(path, key);
  if (v == nullptr) {
    if (required) Error(field, "required value");
    return false;
  }
  if (!v->is_string()) {
    Error(field, WrongType("a string", *v));
    return false;
  }
  *out = v->get<std::string>();
  return true;
}

bool FieldReader::Int(const json& parent, const std::string& path, absl::string_view key,
                      int64_t* out, bool required) {
  const json* v = Member(parent, key);
  std::string field = JoinPath(path, key);
  if (v == nullptr) {
    if (required) Error(field, "required value");
    return false;
  }
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Error(field, "integer out of range");
      return false;
    }
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (!v->is_number_integer()) {
    Error(field, WrongType("an integer", *v));
    return false;
  }
  *out = v->get<int64_t>();
  return true;
}

bool FieldReader::Number(const json& parent, const std::string& path, absl::string_view key,
                         double* out) {
  const json* v = Member(parent, key);
  if (v == nullptr) return false;
  if (!v->is_number()) {
    Error(JoinPath(path, key), WrongType("a number", *v));
    return false;
  }
  *out = v->get<double>();
  return true;
}

bool FieldReader::Bool(const json& parent, const std::string& path, absl::string_view key,
                       bool* out) {
  const json* v = Member(parent, key);
  if (v == nullptr) return false;
  if (!v->is_boolean()) {
    Error(JoinPath(path, key), WrongType("a boolean", *v));
    return false;
  }
  *out = v->get<bool>();
  return true;
}

bool FieldReader::Enum(const json& parent, const std::string& path, absl::string_view key,
                       std::initializer_list<absl::string_view> allowed, std::string* out) {
  std::string value;
  if (!String(parent, path, key, &value)) return false;
  for (absl::string_view a : allowed) {
    if (a == value) {
      *out = value;
      return true;
    }
  }
  Error(JoinPath(path, key),
        absl::StrCat("unsupported value \"", value, "\"; supported values: ",
                     absl::StrJoin(allowed, ", ")));
  return false;
}

bool FieldReader::StringMap(const json& parent, const std::string& path, absl::string_view key,
                            std::map<std::string, std::string>* out) {
  const json* v = Object(parent, path, key);
  if (v == nullptr) return false;
  std::string field = JoinPath(path, key);
  bool ok = true;
  std::map<std::string, std::string> result;
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_string()) {
      Error(JoinPath(field, it.key()), WrongType("a string", it.value()));
      ok = false;
      continue;
    }
    result[it.key()] = it.value().get<std::string>();
  }
  if (ok) *out = std::move(result);
  return ok;
}

bool FieldReader::StringList(const json& parent, const std::string& path, absl::string_view key,
                             std::vector<std::string>* out) {
  const json* v = Array(parent, path, key);
  if (v == nullptr) return false;
  std::string field = JoinPath(path, key);
  bool ok = true;
  std::vector<std::string> result;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    if (!item.is_string()) {
      Error(IndexPath(field, i), WrongType("a string", item));
      ok = false;
      continue;
    }
    result.push_back(item.get<std::string>());
  }
  if (ok) *out = std::move(result);
  return ok;
}

bool FieldReader::Quantity(const json& parent, const std::string& path, absl::string_view key,
                           std::string* out) {
  const json* v = Member(parent, key);
  if (v == nullptr) return false;
  std::string field = JoinPath(path, key);
  std::string text;
  if (v->is_number_integer()) {
    text = v->dump();
  } else if (v->is_string()) {
    text = v->get<std::string>();
  } else {
    Error(field, WrongType("a quantity (string or integer)", *v));
    return false;
  }
  absl::StatusOr<int64_t> parsed = ParseQuantityMillis(text);
  if (!parsed.ok()) {
    Error(field, std::string(parsed.status().message()));
    return false;
  }
  *out = text;
  return true;
}

bool FieldReader::Timestamp(const json& parent, const std::string& path, absl::string_view key,
                            absl::Time* out) {
  std::string text;
  if (!String(parent, path, key, &text)) return false;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, out, &err)) {
    Error(JoinPath(path, key),
          absl::StrCat("invalid timestamp \"", text, "\" (want RFC 3339 such as 2026-01-02T15:04:05Z): ", err));
    return false;
  }
  return true;
}

}  // namespace sluice::op
