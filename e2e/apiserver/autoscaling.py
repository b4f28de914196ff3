"""autoscaling/v2 HorizontalPodAutoscalers: stored, defaulted and validated as a v1.26 server does.

Stored only: no HPA controller runs here (a test that needs one makes its writes itself, as the conformance
replay does for the recorded cluster's controller). Kept so that a controller which must not fight an HPA (the
Sluice autoscaler finds HPAs whose scaleTargetRef names a DataService) can be tested against the test server.
Defaulting is the API server's (minReplicas 1; no metrics: CPU utilization 80%; behavior rules filled in when a
behavior is given), the status is reset on create ({currentMetrics: null, desiredReplicas: 0}) and written
through /status. Validation covers the scale target reference and the replica bounds, with the real
messages; metric specs are not validated. Stateless.
"""

from . import errors, typeschema as ts
from .kinds import ResourceType, Strategy
from .util import deepcopy
from .validation import validate_object_meta

_SCALE_UP = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
             "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                          {"type": "Percent", "value": 100, "periodSeconds": 15}]}
_SCALE_DOWN = {"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
               "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
_DEFAULT_METRICS = [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                               "averageUtilization": 80}}}]


def _rules(given, default):
    if not isinstance(given, dict):
        return deepcopy(default)
    out = dict(given)
    for key in ("stabilizationWindowSeconds", "selectPolicy"):
        if out.get(key) is None:
            out[key] = default[key]
    if not out.get("policies"):
        out["policies"] = deepcopy(default["policies"])
    return out


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


_SPEC_SHAPES = [
    ("scaleTargetRef", lambda v: isinstance(v, dict), "v2.CrossVersionObjectReference"),
    ("minReplicas", _is_int, "int32"),
    ("maxReplicas", _is_int, "int32"),
    ("metrics", lambda v: isinstance(v, list) and all(isinstance(m, dict) for m in v), "[]v2.MetricSpec"),
    ("behavior", lambda v: isinstance(v, dict), "v2.HorizontalPodAutoscalerBehavior"),
]


def _json_kind(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _undecodable(value, field, go_type):
    """The decoder's 400 for a field of the wrong JSON type."""
    raise errors.bad_request('HorizontalPodAutoscaler in version "v2" cannot be handled as a HorizontalPodAutoscaler: '
                             'json: cannot unmarshal %s into Go struct field %s of type %s'
                             % (_json_kind(value), field, go_type))


class HorizontalPodAutoscalerStrategy(Strategy):
    type_node = ts.struct(
        metadata=ts.OBJECT_META,
        spec=ts.struct(metrics=ts.atomic_list(),
                       behavior=ts.struct(scaleUp=ts.struct(policies=ts.atomic_list()),
                                          scaleDown=ts.struct(policies=ts.atomic_list()))),
        status=ts.struct(conditions=ts.keyed_list(["type"]), currentMetrics=ts.atomic_list()),
    )
    status_subresource = True

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None},
                "spec": {"scaleTargetRef": {"kind": "", "name": ""}, "maxReplicas": 0},
                "status": {"currentMetrics": None, "desiredReplicas": 0}}

    def decode(self, obj, rtype):
        spec = obj.get("spec")
        if spec is not None and not isinstance(spec, dict):
            _undecodable(spec, "HorizontalPodAutoscaler.spec", "v2.HorizontalPodAutoscalerSpec")
        spec = obj.setdefault("spec", {})
        for field, check, go_type in _SPEC_SHAPES:
            if spec.get(field) is not None and not check(spec[field]):
                _undecodable(spec[field], "HorizontalPodAutoscalerSpec.spec." + field, go_type)
        if spec.get("minReplicas") is None:
            spec["minReplicas"] = 1
        if not spec.get("metrics"):
            spec["metrics"] = deepcopy(_DEFAULT_METRICS)
        if isinstance(spec.get("behavior"), dict):
            behavior = spec["behavior"]
            behavior["scaleUp"] = _rules(behavior.get("scaleUp"), _SCALE_UP)
            behavior["scaleDown"] = _rules(behavior.get("scaleDown"), _SCALE_DOWN)
        return []

    def prepare_create(self, obj, ctx):
        obj["status"] = {"currentMetrics": None, "desiredReplicas": 0}

    def after_status_update(self, obj):
        status = obj.setdefault("status", {})
        status.setdefault("currentMetrics", None)
        status.setdefault("desiredReplicas", 0)
        return False

    def validate(self, obj, old, rtype):
        problems = validate_object_meta(obj.get("metadata") or {}, rtype.namespaced, "subdomain")
        spec = obj.get("spec") or {}
        minimum = spec.get("minReplicas")
        maximum = spec.get("maxReplicas", 0)
        if _is_int(minimum) and minimum < 1:
            problems.append(errors.invalid("spec.minReplicas", minimum, "must be greater than or equal to 1"))
        if not _is_int(maximum) or maximum < 1:
            problems.append(errors.invalid("spec.maxReplicas", maximum, "must be greater than 0"))
        elif _is_int(minimum) and maximum < minimum:
            problems.append(errors.invalid("spec.maxReplicas", maximum,
                                           "must be greater than or equal to `minReplicas`"))
        ref = spec.get("scaleTargetRef") if isinstance(spec.get("scaleTargetRef"), dict) else {}
        for field in ("kind", "name"):
            value = ref.get(field)
            if not value:
                problems.append(errors.required("spec.scaleTargetRef." + field, ""))
            elif not isinstance(value, str) or value in (".", "..") or "/" in value or "%" in value:
                problems.append(errors.invalid("spec.scaleTargetRef." + field, value,
                                               "may not contain '/' or '%' and may not be '.' or '..'"))
        return problems


def resource_types():
    return [ResourceType("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler",
                         HorizontalPodAutoscalerStrategy(), short_names=["hpa"], subresources=["status"],
                         categories=["all"])]
