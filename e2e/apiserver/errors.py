"""Kubernetes error model: field errors and Status objects shaped like a real API server's.

`FieldError` mirrors k8s.io/apimachinery's field.Error (type, field path, bad value, detail) and renders the
same text; `ApiError` is raised anywhere in the server and carries the Status object the client receives.
Everything here is pure (no I/O) and thread-agnostic.
"""

import json

# Marker for "no bad value recorded" (field.Required and friends print no value).
NO_VALUE = object()

REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
NOT_SUPPORTED = "FieldValueNotSupported"
DUPLICATE = "FieldValueDuplicate"
FORBIDDEN = "FieldValueForbidden"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
TYPE_INVALID = "FieldValueTypeInvalid"
NOT_FOUND = "FieldValueNotFound"
INTERNAL = "InternalError"

_TYPE_TEXT = {
    REQUIRED: "Required value",
    INVALID: "Invalid value",
    NOT_SUPPORTED: "Unsupported value",
    DUPLICATE: "Duplicate value",
    FORBIDDEN: "Forbidden",
    TOO_LONG: "Too long",
    TOO_MANY: "Too many",
    TYPE_INVALID: "Invalid value",
    NOT_FOUND: "Not found",
    INTERNAL: "Internal error",
}
# Types whose rendering never shows the bad value.
_VALUELESS = {REQUIRED, FORBIDDEN, TOO_LONG, INTERNAL}


def go_quote(text):
    """Renders a string the way Go's %q does for the characters that occur in practice."""
    out = json.dumps(text, ensure_ascii=False)
    # json escapes control characters as \u00XX; Go prints \xXX.
    for code in range(0x20):
        esc = "\\u%04x" % code
        if esc in out:
            out = out.replace(esc, "\\x%02x" % code)
    return out


def go_number(value):
    """Renders a number like Go's %v (integral floats without a fraction)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    return str(value)


class GoLiteral(str):
    """A bad value already rendered as Go prints it (%#v of a struct, e.g. core.ServicePort{...})."""


def go_value(value):
    """Renders a bad value as field.Error does: numbers and bools plain, strings quoted, nil as "null", maps,
    slices and structs as Go's %#v (map keys sorted). An object with a `go_repr()` renders itself."""
    if isinstance(value, GoLiteral):
        return str(value)
    if value is None:
        return '"null"'
    return _go_sharp_v(value)


def _go_sharp_v(value):
    if hasattr(value, "go_repr"):
        return value.go_repr()
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, (bool, int, float)):
        return go_number(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, dict):
        return "map[string]interface {}{%s}" % ", ".join(
            "%s:%s" % (go_quote(k), _go_sharp_v(value[k])) for k in sorted(value))
    if isinstance(value, list):
        return "[]interface {}{%s}" % ", ".join(_go_sharp_v(v) for v in value)
    return go_quote(str(value))


def go_plain(value):
    """Go's %v of a JSON value (as unstructured data prints: [1 2], map[a:1], plain strings)."""
    if value is None:
        return "<nil>"
    if isinstance(value, (bool, int, float)):
        return go_number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "map[%s]" % " ".join("%s:%s" % (k, go_plain(value[k])) for k in sorted(value))
    if isinstance(value, list):
        return "[%s]" % " ".join(go_plain(v) for v in value)
    return str(value)


def go_type(value):
    """Go's %T of a JSON value decoded into interface{} (as Kubernetes' unstructured objects hold it)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    return "map[string]interface {}"


class FieldError:
    """One validation failure at a field path (like field.Error)."""

    __slots__ = ("type", "field", "value", "detail")

    def __init__(self, type_, field, value=NO_VALUE, detail=""):
        self.type = type_
        self.field = field
        self.value = value
        self.detail = detail

    def body(self):
        if self.type in _VALUELESS or self.value is NO_VALUE:
            text = _TYPE_TEXT[self.type]
        else:
            text = "%s: %s" % (_TYPE_TEXT[self.type], go_value(self.value))
        if self.detail:
            text += ": " + self.detail
        return text

    def __str__(self):
        return "%s: %s" % (self.field, self.body())

    def __repr__(self):
        return "FieldError(%s)" % self

    def cause(self):
        return {"reason": self.type, "message": self.body(), "field": self.field}


def required(field, detail=""):
    return FieldError(REQUIRED, field, NO_VALUE, detail)


def invalid(field, value, detail):
    return FieldError(INVALID, field, value, detail)


def not_supported(field, value, allowed):
    detail = "supported values: " + ", ".join(go_quote(str(a)) if isinstance(a, str) else go_number(a)
                                              for a in allowed) if allowed else ""
    return FieldError(NOT_SUPPORTED, field, value, detail)


def forbidden(field, detail):
    return FieldError(FORBIDDEN, field, NO_VALUE, detail)


def duplicate(field, value):
    return FieldError(DUPLICATE, field, value)


def field_not_found(field, value):
    return FieldError(NOT_FOUND, field, value)


def type_invalid(field, value, detail):
    return FieldError(TYPE_INVALID, field, value, detail)


def too_long(field, limit):
    return FieldError(TOO_LONG, field, NO_VALUE, "may not be longer than %d" % limit)


def too_many(field, actual, limit):
    return FieldError(TOO_MANY, field, actual, "must have at most %d items" % limit)


def aggregate(errors):
    """Joins errors like utilerrors.NewAggregate: one error bare, several in brackets."""
    texts = [str(e) for e in errors]
    if len(texts) == 1:
        return texts[0]
    return "[" + ", ".join(texts) + "]"


def qualified_resource(group, resource):
    return "%s.%s" % (resource, group) if group else resource


class ApiError(Exception):
    """An error answered as a Kubernetes Status object with an HTTP status code."""

    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(group, kind, name=None, causes=None, uid=None):
    details = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    if uid:
        details["uid"] = uid
    if causes:
        details["causes"] = causes
    return details


def not_found(group, resource, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (qualified_resource(group, resource), name),
                    _details(group, resource, name))


def path_not_found():
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(group, resource, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (qualified_resource(group, resource), name),
                    _details(group, resource, name))


STALE_DETAIL = "the object has been modified; please apply your changes to the latest version and try again"


def conflict(group, resource, name, detail=STALE_DETAIL):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                    % (qualified_resource(group, resource), name, detail), _details(group, resource, name))


def invalid_object(group, kind, name, errors):
    qualified = "%s.%s" % (kind, group) if group else kind
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (qualified, name, aggregate(errors)),
                    _details(group, kind, name, [e.cause() for e in errors]))


def unprocessable_patch():
    """The answer to a JSON patch that cannot be applied (a failing `test`, a missing path)."""
    return ApiError(422, "Invalid", "the server rejected our request due to an error in our request", {})


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def unauthorized():
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden_request(message, group=None, resource=None, name=None):
    return ApiError(403, "Forbidden", message, _details(group, resource, name))


def namespace_terminating(group, resource, name, namespace):
    """The NamespaceLifecycle admission plugin's refusal of a create in a terminating namespace (Kubernetes'
    plugin/pkg/admission/namespace/lifecycle: admission.NewForbidden plus a NamespaceTerminating cause). Not in the
    recordings; shaped after that source."""
    what = qualified_resource(group, resource)
    reason = "unable to create new content in namespace %s because it is being terminated" % namespace
    message = '%s "%s" is forbidden: %s' % (what, name, reason) if name else "%s is forbidden: %s" % (what, reason)
    return ApiError(403, "Forbidden", message, _details(group, resource, name, [
        {"reason": "NamespaceTerminating", "message": "namespace %s is being terminated" % namespace,
         "field": "metadata.namespace"}]))


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource",
                    {})


def unsupported_media_type(content_type, accepted):
    return ApiError(415, "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: "
                    + ", ".join(accepted), {})


def expired(message):
    return ApiError(410, "Expired", message)


def too_many_requests(retry_after):
    return ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                    {"retryAfterSeconds": retry_after} if retry_after else {},
                    {"Retry-After": str(retry_after)} if retry_after else {})


def internal_error(message):
    return ApiError(500, "InternalError", "Internal error occurred: " + message,
                    {"causes": [{"message": message}]})


def service_unavailable(message="the server is currently unable to handle the request"):
    return ApiError(503, "ServiceUnavailable", message, {})


def timeout(message, retry_after=1):
    return ApiError(504, "Timeout", message, {"retryAfterSeconds": retry_after},
                    {"Retry-After": str(retry_after)})


def too_large_resource_version(wanted, current):
    return ApiError(504, "Timeout", "Too large resource version: %d, current: %d" % (wanted, current),
                    {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                     "retryAfterSeconds": 1}, {"Retry-After": "1"})


def status_for_code(code, message=None, retry_after=None):
    """A Status for an injected fault with only an HTTP code given."""
    if code == 409:
        return ApiError(409, "Conflict", message or "injected conflict", {})
    if code == 429:
        err = too_many_requests(retry_after or 1)
        if message:
            err.message = message
        return err
    if code == 500:
        return ApiError(500, "InternalError", message or "Internal error occurred: injected fault", {})
    if code == 503:
        return service_unavailable(message or "the server is currently unable to handle the request")
    if code == 504:
        return timeout(message or "injected timeout", retry_after or 1)
    if code == 410:
        return expired(message or "injected expiry")
    if code == 404:
        return ApiError(404, "NotFound", message or "injected not found", {})
    if code == 403:
        return ApiError(403, "Forbidden", message or "injected forbidden", {})
    if code == 401:
        return unauthorized()
    if code == 400:
        return bad_request(message or "injected bad request")
    if code == 422:
        return ApiError(422, "Invalid", message or "injected invalid", {})
    return ApiError(code, "", message or "injected fault %d" % code, {})


def success_status(code=200, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        body["details"] = details
    if code != 200:
        body["code"] = code
    return body


def success_delete_details(group, resource, name, uid):
    return _details(group, resource, name, uid=uid)
