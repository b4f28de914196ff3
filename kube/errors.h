// Kubernetes API errors as absl::Status.
//
// StatusFromResponse turns an HTTP error answer (normally a meta/v1 Status object) into a precise
// absl::Status code and keeps the Kubernetes reason and HTTP code retrievable as payloads:
//   404 NotFound -> NotFound        409 AlreadyExists -> AlreadyExists   409 Conflict -> Aborted
//   422 Invalid / 400 BadRequest -> InvalidArgument (cause field paths listed in the message)
//   403 Forbidden -> PermissionDenied   401 Unauthorized -> Unauthenticated
//   410 Expired/Gone -> OutOfRange       429 TooManyRequests -> ResourceExhausted
//   500 -> Internal, 502/503/504 -> Unavailable, 405 -> Unimplemented, others -> Unknown
// Pure functions; thread-safe.
#ifndef SLUICE_KUBE_ERRORS_H_
#define SLUICE_KUBE_ERRORS_H_

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "nlohmann/json_fwd.hpp"

namespace sluice::kube {

// Payload type URLs carrying the Kubernetes reason (e.g. "Conflict") and HTTP code (e.g. "409").
inline constexpr absl::string_view kReasonPayload = "type.sluice.dev/kube.reason";
inline constexpr absl::string_view kHttpCodePayload = "type.sluice.dev/kube.code";
// The `reason` of every cause in the Status's details, comma-separated (e.g. "NamespaceTerminating").
inline constexpr absl::string_view kCausesPayload = "type.sluice.dev/kube.causes";

// `body` is the raw response body (a Status object, or anything else a proxy may send);
// `what` names the request, e.g. "GET /api/v1/namespaces/x/pods/y".
absl::Status StatusFromResponse(int http_code, absl::string_view body, absl::string_view what);
// From an already parsed meta/v1 Status object (e.g. a watch ERROR event's object).
absl::Status StatusFromStatusObject(const nlohmann::json& status, int fallback_http_code,
                                    absl::string_view what);

// The Kubernetes reason ("NotFound", "Conflict", ...) or "" if the status carries none.
std::string KubeReason(const absl::Status& status);
// The HTTP code, or 0 if the status carries none.
int KubeHttpCode(const absl::Status& status);

// Whether the Status named a cause of this type (details.causes[].reason), like client-go's
// HasStatusCause: e.g. "NamespaceTerminating" on the 403 refusing a create in a namespace that is
// being deleted, or "FieldManagerConflict" on a 409 from server-side apply.
bool HasStatusCause(const absl::Status& status, absl::string_view cause);

// NotFound and AlreadyExists need no helper: use absl::IsNotFound / absl::IsAlreadyExists.
// A write lost a race: 409 Conflict, or a failed guard (`test` op) of a guarded JSON patch.
bool IsConflict(const absl::Status& status);
bool IsInvalid(const absl::Status& status);
// 410 Gone / Expired: the resourceVersion (or continue token) is too old; relist.
bool IsGone(const absl::Status& status);
bool IsForbidden(const absl::Status& status);
bool IsUnauthorized(const absl::Status& status);
bool IsTooManyRequests(const absl::Status& status);

// Attaches reason/code payloads to `status` (used by the client for synthesized errors).
absl::Status WithKubeDetails(absl::Status status, absl::string_view reason, int http_code);

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_ERRORS_H_
