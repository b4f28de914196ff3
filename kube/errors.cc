#include "kube/errors.h"

#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {
namespace {

using nlohmann::json;

std::string StringField(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

absl::StatusCode CodeFor(int http_code, absl::string_view reason) {
  if (reason == "NotFound") return absl::StatusCode::kNotFound;
  if (reason == "AlreadyExists") return absl::StatusCode::kAlreadyExists;
  if (reason == "Conflict") return absl::StatusCode::kAborted;
  if (reason == "Invalid" || reason == "BadRequest") return absl::StatusCode::kInvalidArgument;
  if (reason == "Forbidden") return absl::StatusCode::kPermissionDenied;
  if (reason == "Unauthorized") return absl::StatusCode::kUnauthenticated;
  if (reason == "Expired" || reason == "Gone") return absl::StatusCode::kOutOfRange;
  if (reason == "TooManyRequests") return absl::StatusCode::kResourceExhausted;
  if (reason == "MethodNotAllowed") return absl::StatusCode::kUnimplemented;
  if (reason == "ServiceUnavailable" || reason == "Timeout") return absl::StatusCode::kUnavailable;
  if (reason == "InternalError") return absl::StatusCode::kInternal;
  switch (http_code) {
    case 400:
    case 406:
    case 413:
    case 415:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 500:
      return absl::StatusCode::kInternal;
    default:
      break;
  }
  if (http_code >= 500 && http_code <= 599) return absl::StatusCode::kUnavailable;
  return absl::StatusCode::kUnknown;
}

std::string DefaultReason(int http_code) {
  switch (http_code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 415: return "UnsupportedMediaType";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return "";
  }
}

std::optional<std::string> PayloadString(const absl::Status& status, absl::string_view url) {
  absl::optional<absl::Cord> cord = status.GetPayload(url);
  if (!cord) return std::nullopt;
  return std::string(*cord);
}

}  // namespace

absl::Status WithKubeDetails(absl::Status status, absl::string_view reason, int http_code) {
  if (status.ok()) return status;
  if (!reason.empty()) status.SetPayload(kReasonPayload, absl::Cord(reason));
  if (http_code != 0) status.SetPayload(kHttpCodePayload, absl::Cord(absl::StrCat(http_code)));
  return status;
}

absl::Status StatusFromStatusObject(const json& status, int fallback_http_code, absl::string_view what) {
  int code = fallback_http_code;
  if (status.is_object()) {
    auto it = status.find("code");
    if (it != status.end() && it->is_number_integer()) code = it->get<int>();
  }
  std::string reason = StringField(status, "reason");
  if (reason.empty()) reason = DefaultReason(code);
  std::string message = StringField(status, "message");
  std::string text = absl::StrCat(reason.empty() ? "HTTP error" : reason, " (HTTP ", code, ")");
  if (!what.empty()) absl::StrAppend(&text, " from ", what);
  if (!message.empty()) absl::StrAppend(&text, ": ", message);
  // Field paths of the causes (422 Invalid, SSA conflicts), so the caller can see which fields.
  if (status.is_object() && status.contains("details") && status["details"].is_object()) {
    const json& details = status["details"];
    auto causes = details.find("causes");
    if (causes != details.end() && causes->is_array() && !causes->empty()) {
      std::vector<std::string> parts;
      for (const json& cause : *causes) {
        std::string field = StringField(cause, "field");
        std::string cause_message = StringField(cause, "message");
        std::string cause_reason = StringField(cause, "reason");
        parts.push_back(absl::StrCat(field.empty() ? "<no field>" : field, ": ",
                                     cause_reason.empty() ? "" : absl::StrCat("[", cause_reason, "] "),
                                     cause_message));
      }
      absl::StrAppend(&text, " [causes: ", absl::StrJoin(parts, "; "), "]");
      std::vector<std::string> reasons;
      for (const json& cause : *causes) {
        if (std::string r = StringField(cause, "reason"); !r.empty()) reasons.push_back(std::move(r));
      }
      absl::Status out = WithKubeDetails(absl::Status(CodeFor(code, reason), text), reason, code);
      if (!reasons.empty()) out.SetPayload(kCausesPayload, absl::Cord(absl::StrJoin(reasons, ",")));
      return out;
    }
  }
  return WithKubeDetails(absl::Status(CodeFor(code, reason), text), reason, code);
}

absl::Status StatusFromResponse(int http_code, absl::string_view body, absl::string_view what) {
  json parsed = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && StringField(parsed, "kind") == "Status") {
    return StatusFromStatusObject(parsed, http_code, what);
  }
  // Not a Status (e.g. an HTML page from a proxy): keep a bounded excerpt of the body.
  std::string reason = DefaultReason(http_code);
  std::string excerpt(body.substr(0, 300));
  std::string text = absl::StrCat(reason.empty() ? "HTTP error" : reason, " (HTTP ", http_code, ")");
  if (!what.empty()) absl::StrAppend(&text, " from ", what);
  if (!excerpt.empty()) absl::StrAppend(&text, ": ", excerpt);
  return WithKubeDetails(absl::Status(CodeFor(http_code, reason), text), reason, http_code);
}

std::string KubeReason(const absl::Status& status) {
  return PayloadString(status, kReasonPayload).value_or("");
}

int KubeHttpCode(const absl::Status& status) {
  std::optional<std::string> code = PayloadString(status, kHttpCodePayload);
  int value = 0;
  if (!code || !absl::SimpleAtoi(*code, &value)) return 0;
  return value;
}

bool HasStatusCause(const absl::Status& status, absl::string_view cause) {
  std::optional<std::string> causes = PayloadString(status, kCausesPayload);
  if (!causes) return false;
  for (absl::string_view c : absl::StrSplit(*causes, ',')) {
    if (c == cause) return true;
  }
  return false;
}

bool IsConflict(const absl::Status& s) { return s.code() == absl::StatusCode::kAborted; }
bool IsInvalid(const absl::Status& s) { return s.code() == absl::StatusCode::kInvalidArgument; }
bool IsGone(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kOutOfRange) return false;
  std::string reason = KubeReason(s);
  return KubeHttpCode(s) == 410 || reason == "Expired" || reason == "Gone";
}
bool IsForbidden(const absl::Status& s) { return s.code() == absl::StatusCode::kPermissionDenied; }
bool IsUnauthorized(const absl::Status& s) { return s.code() == absl::StatusCode::kUnauthenticated; }
bool IsTooManyRequests(const absl::Status& s) {
  return s.code() == absl::StatusCode::kResourceExhausted;
}

}  // namespace sluice::kube
