"""Resource types and the per-kind behaviour of the built-in kinds (a "strategy" per kind).

A ResourceType is one served group/version/resource; its Strategy says how objects of that kind are defaulted
at decode time (fields the writer then owns), mutated by the server on create/update (fields nobody owns:
pod status, service cluster IPs, node taints, service-account volumes), validated, deleted gracefully, and
converted between the stored form and the served form (events.k8s.io/v1 over core/v1 events).
Strategies are stateless apart from the service IP allocator (guarded by the registry's store lock).
"""

import base64
import hashlib
import re

from .. import quantity
from . import errors, typeschema as ts
from .util import deepcopy, random_suffix
from .selection import label_key_error, label_value_error
from .validation import name_problems, validate_object_meta

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUB_VERBS = ["get", "patch", "update"]


def storage_version_hash(group, version, kind):
    digest = hashlib.sha256(("%s/%s/%s" % (group, version, kind)).encode()).digest()
    return base64.b64encode(digest[:8]).decode()


class ResourceType:
    """One served resource (group, version, plural) and the strategy for its kind."""

    def __init__(self, group, version, resource, kind, strategy, namespaced=True, short_names=(), singular="",
                 verbs=None, subresources=(), storage=None, categories=(), discovery_singular=""):
        self.group = group
        self.version = version
        self.resource = resource
        self.kind = kind
        self.strategy = strategy
        self.namespaced = namespaced
        self.short_names = list(short_names)
        self.singular = singular or kind.lower()
        self.discovery_singular = discovery_singular
        self.verbs = list(verbs or ALL_VERBS)
        self.subresources = list(subresources)
        self.storage = storage or "%s/%s" % (group, resource)
        self.categories = list(categories)

    @property
    def api_version(self):
        return "%s/%s" % (self.group, self.version) if self.group else self.version

    @property
    def list_kind(self):
        return self.kind + "List"

    def qualified(self):
        return errors.qualified_resource(self.group, self.resource)

    def discovery(self):
        entries = []
        main = {"name": self.resource, "singularName": self.discovery_singular, "namespaced": self.namespaced,
                "kind": self.kind, "verbs": self.verbs}
        if self.short_names:
            main["shortNames"] = self.short_names
        if self.categories:
            main["categories"] = self.categories
        main["storageVersionHash"] = storage_version_hash(self.group, self.version, self.kind)
        entries.append(main)
        for sub in self.subresources:
            if sub == "scale":
                entries.append({"name": "%s/scale" % self.resource, "singularName": "", "namespaced": self.namespaced,
                                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": SUB_VERBS})
            elif sub == "binding":
                entries.append({"name": "%s/binding" % self.resource, "singularName": "",
                                "namespaced": self.namespaced, "kind": "Binding", "verbs": ["create"]})
            else:
                entries.append({"name": "%s/%s" % (self.resource, sub), "singularName": "",
                                "namespaced": self.namespaced, "kind": self.kind, "verbs": SUB_VERBS})
        return entries


class DeleteOptions:
    def __init__(self, grace_period=None, propagation=None, preconditions=None, dry_run=False):
        self.grace_period = grace_period
        self.propagation = propagation
        self.preconditions = preconditions or {}
        self.dry_run = dry_run


class Strategy:
    """Default behaviour: a plain object with metadata and no server-side mutation."""

    type_node = ts.struct(metadata=ts.OBJECT_META)
    has_generation = False
    status_subresource = False
    allow_create_on_update = False
    allow_unconditional_update = True
    return_deleted_object = False
    name_rule = "subdomain"
    field_labels = ()
    indexed_fields = {}
    scale = None  # (spec replicas path, status replicas path, selector path) or a callable

    def qualified_kind(self, rtype):
        return rtype.group, rtype.kind

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None}}

    def decode(self, obj, rtype):
        """Decode-time defaulting (the writer owns these fields); raises ApiError 400 if undecodable."""

    def prepare_create(self, obj, ctx):
        """Server-side mutations on create that nobody owns."""

    def prepare_update(self, new, old, ctx):
        """Server-side mutations on update."""

    def validate(self, obj, old, rtype):
        return validate_object_meta(obj.get("metadata") or {}, rtype.namespaced, self.name_rule)

    def spec_changed(self, new, old):
        for key in set(new) | set(old):
            if key in ("metadata", "status", "apiVersion", "kind"):
                continue
            if new.get(key) != old.get(key):
                return True
        return False

    def field_value(self, obj, label):
        meta = obj.get("metadata") or {}
        if label == "metadata.name":
            return meta.get("name", "")
        if label == "metadata.namespace":
            return meta.get("namespace", "")
        getter = _FIELD_GETTERS.get(label)
        return getter(obj) if getter else None

    def supported_field_labels(self):
        return {"metadata.name", "metadata.namespace"} | set(self.field_labels)

    def unsupported_field_message(self, label):
        return "field label not supported: %s" % label

    def grace_period(self, obj, options):
        """Seconds the object stays Terminating after a delete; 0 deletes at once."""
        return 0

    def to_view(self, obj, rtype):
        """The stored object as served by rtype (conversion between versions/groups)."""
        if obj.get("apiVersion") != rtype.api_version or obj.get("kind") != rtype.kind:
            obj = dict(obj)
            obj["apiVersion"] = rtype.api_version
            obj["kind"] = rtype.kind
        return obj

    def from_view(self, obj, rtype):
        return obj

    def after_status_update(self, obj):
        """Controller reactions to a status write (returns True if obj was changed)."""
        return False

    def typing_error(self, obj):
        """Why structured-merge-diff cannot type obj with this kind's schema (None: it can, or unknown)."""
        return None


def _path_getter(*path):
    def get(obj):
        current = obj
        for key in path:
            if not isinstance(current, dict):
                return None
            current = current.get(key)
        return current if current is None or isinstance(current, str) else str(current).lower() \
            if isinstance(current, bool) else str(current)
    return get


_FIELD_GETTERS = {}
for _label in ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
               "status.phase", "status.podIP", "status.nominatedNodeName", "spec.unschedulable", "type", "reason",
               "reportingComponent", "spec.hostNetwork", "involvedObject.kind", "involvedObject.name",
               "involvedObject.namespace", "involvedObject.uid", "involvedObject.apiVersion",
               "involvedObject.resourceVersion", "involvedObject.fieldPath", "source", "regarding.kind",
               "regarding.name", "regarding.namespace", "regarding.uid", "regarding.apiVersion",
               "reportingController", "spec.volumeName"):
    _FIELD_GETTERS[_label] = _path_getter(*_label.split("."))
_FIELD_GETTERS["source"] = lambda obj: (obj.get("source") or {}).get("component", "")


def _check_quantities(kind, resources, path):
    for section in ("requests", "limits", "capacity", "allocatable"):
        values = (resources or {}).get(section)
        if not isinstance(values, dict):
            continue
        for value in values.values():
            try:
                quantity.parse(value)
            except quantity.QuantityError as exc:
                raise errors.bad_request('%s in version "v1" cannot be handled as a %s: %s' % (kind, kind, exc))


# --------------------------------------------------------------------------------------------- pods

CONTAINER = ts.struct(
    ports=ts.keyed_list(["containerPort", "protocol"]),
    env=ts.keyed_list(["name"]),
    envFrom=ts.atomic_list(),
    volumeMounts=ts.keyed_list(["mountPath"]),
    volumeDevices=ts.keyed_list(["devicePath"]),
    resources=ts.struct(limits=ts.smap(), requests=ts.smap()),
    args=ts.atomic_list(),
    command=ts.atomic_list(),
)
POD_SPEC = ts.struct(
    containers=ts.keyed_list(["name"], CONTAINER),
    initContainers=ts.keyed_list(["name"], CONTAINER),
    ephemeralContainers=ts.keyed_list(["name"], CONTAINER),
    volumes=ts.keyed_list(["name"]),
    tolerations=ts.atomic_list(),
    imagePullSecrets=ts.keyed_list(["name"]),
    nodeSelector=ts.atomic_map(),
    topologySpreadConstraints=ts.keyed_list(["topologyKey", "whenUnsatisfiable"]),
    hostAliases=ts.keyed_list(["ip"]),
    readinessGates=ts.atomic_list(),
)
POD_STATUS = ts.struct(
    conditions=ts.keyed_list(["type"]),
    podIPs=ts.keyed_list(["ip"]),
    hostIPs=ts.keyed_list(["ip"]),
    containerStatuses=ts.atomic_list(),
    initContainerStatuses=ts.atomic_list(),
    ephemeralContainerStatuses=ts.atomic_list(),
)
POD_TEMPLATE = ts.struct(metadata=ts.OBJECT_META, spec=POD_SPEC)

_POD_UPDATE_FORBIDDEN = ("pod updates may not change fields other than `spec.containers[*].image`,"
                         "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
                         "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
                         "set to 1 if it was previously negative)")


def _default_container(container):
    image = container.get("image") or ""
    if "imagePullPolicy" not in container:
        tag = image.rsplit("/", 1)[-1]
        has_tag = ":" in tag and not image.endswith(":latest")
        container["imagePullPolicy"] = "IfNotPresent" if has_tag or "@" in image else "Always"
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for env in container.get("env") or []:
        ref = ((env or {}).get("valueFrom") or {}).get("fieldRef")
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")
    resources = container.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        requests = resources.setdefault("requests", {})
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if isinstance(probe, dict):
            probe.setdefault("timeoutSeconds", 1)
            probe.setdefault("periodSeconds", 10)
            probe.setdefault("successThreshold", 1)
            probe.setdefault("failureThreshold", 3)
            if isinstance(probe.get("httpGet"), dict):
                probe["httpGet"].setdefault("scheme", "HTTP")
                probe["httpGet"].setdefault("path", "/")


def default_pod_spec(spec):
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("enableServiceLinks", True)
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _default_container(container)
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        for source in ("configMap", "secret"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 420)


def _qos_class(spec):
    requests_seen = limits_seen = False
    guaranteed = True
    for container in spec.get("containers") or []:
        resources = (container or {}).get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        if requests:
            requests_seen = True
        if limits:
            limits_seen = True
        for res in ("cpu", "memory"):
            if res not in limits or requests.get(res, limits.get(res)) != limits.get(res):
                guaranteed = False
    if not requests_seen and not limits_seen:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_pod_status_conditions(status):
    for cond in (status or {}).get("conditions") or []:
        if isinstance(cond, dict):
            cond.setdefault("lastProbeTime", None)
            cond.setdefault("lastTransitionTime", None)


# Field checks of core/v1 pods and services that a real API server makes (pkg/apis/core/validation of Kubernetes
# v1.26: validateContainerPorts, validateEnv, validateVolumes/validateVolumeMounts, ValidateResourceRequirements,
# validateTolerations, validateNodeFieldSelectorRequirement, ValidateService/validateServicePort), with its
# messages. The recordings in testing/kube-fixtures cover none of these refusals; they follow that source.

_PORT_PROTOCOLS = ["SCTP", "TCP", "UDP"]
_PORT_NAME_CHARS = re.compile(r"^[-a-z0-9]+$")
_ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_ENV_VAR_MESSAGE = ("a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or "
                    "'.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', "
                    "regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')")
_FIELD_REF_PATHS = ["metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                    "spec.serviceAccountName", "status.hostIP", "status.podIP", "status.podIPs"]
_FIELD_REF_PREFIXES = ("metadata.annotations['", "metadata.labels['")
_TAINT_EFFECTS = ["NoExecute", "NoSchedule", "PreferNoSchedule"]


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def port_name_problems(name):
    """validation.IsValidPortName (an IANA_SVC_NAME)."""
    out = []
    if len(name) > 15:
        out.append("must be no more than 15 characters")
    if not _PORT_NAME_CHARS.match(name):
        out.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search(r"[a-z]", name):
        out.append("must contain at least one letter (a-z)")
    if "--" in name:
        out.append("must not contain consecutive hyphens")
    if name and (name[0] == "-" or name[-1] == "-"):
        out.append("must not begin or end with a hyphen")
    return out


def port_number_problems(number):
    """validation.IsValidPortNum."""
    if not _is_int(number) or not 0 < number < 65536:
        return ["must be between 1 and 65535, inclusive"]
    return []


def _port_num_or_name(value, path):
    """ValidatePortNumOrName (an intstr: a number, or a port name)."""
    if isinstance(value, str):
        return [errors.invalid(path, value, m) for m in port_name_problems(value)]
    return [errors.invalid(path, value, m) for m in port_number_problems(value)]


def _label_map_problems(labels, path):
    """ValidateLabels: keys and values of a selector map (e.g. nodeSelector, a Service's selector)."""
    problems = []
    if not isinstance(labels, dict):
        return [errors.invalid(path, labels, "must be a map of strings")]
    for key, value in labels.items():
        key_problem = label_key_error(key)
        if key_problem:
            problems.append(errors.invalid(path, key, key_problem))
        value_problem = label_value_error(value) if isinstance(value, str) else "must be a string"
        if value_problem:
            problems.append(errors.invalid(path, value, value_problem))
    return problems


def _container_ports_problems(ports, path):
    problems, names = [], set()
    for j, port in enumerate(ports or []):
        ppath = "%s[%d]" % (path, j)
        if not isinstance(port, dict):
            problems.append(errors.invalid(ppath, port, "must be an object"))
            continue
        name = port.get("name")
        if name:
            messages = port_name_problems(name) if isinstance(name, str) else ["must be a string"]
            if messages:
                problems += [errors.invalid(ppath + ".name", name, m) for m in messages]
            elif name in names:
                problems.append(errors.duplicate(ppath + ".name", name))
            else:
                names.add(name)
        number = port.get("containerPort")
        if not number:
            problems.append(errors.required(ppath + ".containerPort", ""))
        else:
            problems += [errors.invalid(ppath + ".containerPort", number, m) for m in port_number_problems(number)]
        protocol = port.get("protocol")
        if not protocol:
            problems.append(errors.required(ppath + ".protocol", ""))
        elif protocol not in _PORT_PROTOCOLS:
            problems.append(errors.not_supported(ppath + ".protocol", protocol, _PORT_PROTOCOLS))
    return problems


def _env_problems(env, path):
    problems = []
    for j, var in enumerate(env or []):
        epath = "%s[%d]" % (path, j)
        if not isinstance(var, dict):
            problems.append(errors.invalid(epath, var, "must be an object"))
            continue
        name = var.get("name")
        if not name:
            problems.append(errors.required(epath + ".name", ""))
        elif not isinstance(name, str) or not _ENV_VAR_NAME.match(name):
            problems.append(errors.invalid(epath + ".name", name, _ENV_VAR_MESSAGE))
        ref = (var.get("valueFrom") or {}).get("fieldRef") if isinstance(var.get("valueFrom"), dict) else None
        if isinstance(ref, dict):
            fpath = epath + ".valueFrom.fieldRef.fieldPath"
            field_path = ref.get("fieldPath")
            if not field_path:
                problems.append(errors.required(fpath, ""))
            elif field_path not in _FIELD_REF_PATHS and not (isinstance(field_path, str)
                                                              and field_path.startswith(_FIELD_REF_PREFIXES)):
                problems.append(errors.not_supported(fpath, field_path, _FIELD_REF_PATHS))
    return problems


def _volume_mount_problems(mounts, volumes, path):
    problems, paths = [], set()
    for j, mount in enumerate(mounts or []):
        mpath = "%s[%d]" % (path, j)
        if not isinstance(mount, dict):
            problems.append(errors.invalid(mpath, mount, "must be an object"))
            continue
        name = mount.get("name")
        if not name:
            problems.append(errors.required(mpath + ".name", ""))
        elif name not in volumes:
            problems.append(errors.field_not_found(mpath + ".name", name))
        mount_path = mount.get("mountPath")
        if not mount_path:
            problems.append(errors.required(mpath + ".mountPath", ""))
        elif mount_path in paths:
            problems.append(errors.invalid(mpath + ".mountPath", mount_path, "must be unique"))
        paths.add(mount_path)
    return problems


def _requests_within_limits(resources, path):
    """A request above its limit (ValidateResourceRequirements). Quantities that do not parse were refused at
    decode time (400)."""
    problems = []
    requests = (resources or {}).get("requests") if isinstance(resources, dict) else None
    limits = (resources or {}).get("limits") if isinstance(resources, dict) else None
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        return problems
    for name, value in requests.items():
        if name not in limits:
            continue
        try:
            above = quantity.parse(value) > quantity.parse(limits[name])
        except quantity.QuantityError:
            continue
        if above:
            problems.append(errors.invalid(path + ".requests", str(value),
                                           "must be less than or equal to %s limit" % name))
    return problems


def _toleration_problems(tolerations, path):
    problems = []
    if not isinstance(tolerations, list):
        return problems
    for i, t in enumerate(tolerations):
        tpath = "%s[%d]" % (path, i)
        if not isinstance(t, dict):
            problems.append(errors.invalid(tpath, t, "must be an object"))
            continue
        key, op, value, effect = t.get("key") or "", t.get("operator") or "", t.get("value") or "", t.get("effect")
        if key:
            key_problem = label_key_error(key)
            if key_problem:
                problems.append(errors.invalid(tpath + ".key", key, key_problem))
        if not key and op != "Exists":
            problems.append(errors.invalid(tpath + ".operator", op, "operator must be Exists when `key` is empty, "
                                           "which means \"match all values and all keys\""))
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            problems.append(errors.invalid(tpath + ".effect", effect or "",
                                           "effect must be 'NoExecute' when `tolerationSeconds` is set"))
        if op in ("Equal", ""):
            value_problem = label_value_error(value) if isinstance(value, str) else "must be a string"
            if value_problem:
                problems.append(errors.invalid(tpath + ".operator", value, value_problem))
        elif op == "Exists":
            if value:
                problems.append(errors.invalid(tpath + ".operator", errors.GoLiteral(
                    "core.Toleration{Key:%s, Operator:\"Exists\", Value:%s, Effect:%s, TolerationSeconds:%s}" % (
                        errors.go_quote(key), errors.go_quote(value), errors.go_quote(effect or ""),
                        "(*int64)(nil)" if t.get("tolerationSeconds") is None else "(*int64)(0x0)")),
                    "value must be empty when `operator` is 'Exists'"))
        else:
            problems.append(errors.not_supported(tpath + ".operator", op, ["Equal", "Exists"]))
        if effect and effect not in _TAINT_EFFECTS:
            problems.append(errors.not_supported(tpath + ".effect", effect, _TAINT_EFFECTS))
    return problems


def _node_affinity_problems(affinity, path):
    """Required node affinity terms: matchFields may only name metadata.name, with In/NotIn and one value."""
    problems = []
    node = (affinity or {}).get("nodeAffinity") if isinstance(affinity, dict) else None
    required = (node or {}).get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node, dict) else None
    if not isinstance(required, dict):
        return problems
    rpath = path + ".nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return [errors.required(rpath + ".nodeSelectorTerms", "must have at least one node selector term")]
    for i, term in enumerate(terms):
        for j, req in enumerate((term or {}).get("matchFields") or []):
            fpath = "%s.nodeSelectorTerms[%d].matchFields[%d]" % (rpath, i, j)
            op, values = (req or {}).get("operator"), (req or {}).get("values") or []
            if op in ("In", "NotIn"):
                if len(values) != 1:
                    problems.append(errors.required(fpath + ".values", "must be only one value when `operator` "
                                                                        "is 'In' or 'NotIn' for node field selector"))
            else:
                problems.append(errors.invalid(fpath + ".operator", op, "not a valid selector operator"))
            if (req or {}).get("key") != "metadata.name":
                problems.append(errors.invalid(fpath + ".key", (req or {}).get("key"), "not a valid field selector key"))
            else:
                for k, value in enumerate(values):
                    for message in name_problems(value, "subdomain") if isinstance(value, str) else ["must be a string"]:
                        problems.append(errors.invalid("%s.values[%d]" % (fpath, k), value, message))
    return problems


def validate_pod_spec(spec, path):
    problems = []
    if not isinstance(spec, dict):
        return [errors.required(path, "")]
    volumes = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = (volume or {}).get("name") if isinstance(volume, dict) else None
        vpath = "%s.volumes[%d].name" % (path, i)
        if not name:
            problems.append(errors.required(vpath, ""))
        elif name in volumes:
            problems.append(errors.duplicate(vpath, name))
        else:
            for message in name_problems(name, "label"):
                problems.append(errors.invalid(vpath, name, message))
        if name:
            volumes.add(name)
    containers = spec.get("containers")
    if not containers:
        problems.append(errors.required(path + ".containers", ""))
    names = set()
    for key in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(key) or []):
            cpath = "%s.%s[%d]" % (path, key, i)
            if not isinstance(container, dict):
                problems.append(errors.invalid(cpath, container, "must be an object"))
                continue
            name = container.get("name")
            if not name:
                problems.append(errors.required(cpath + ".name", ""))
            else:
                for message in name_problems(name, "label"):
                    problems.append(errors.invalid(cpath + ".name", name, message))
                if name in names:
                    problems.append(errors.duplicate(cpath + ".name", name))
                names.add(name)
            if not container.get("image"):
                problems.append(errors.required(cpath + ".image", ""))
            problems += _container_ports_problems(container.get("ports"), cpath + ".ports")
            problems += _env_problems(container.get("env"), cpath + ".env")
            problems += _volume_mount_problems(container.get("volumeMounts"), volumes, cpath + ".volumeMounts")
            problems += _requests_within_limits(container.get("resources"), cpath + ".resources")
            for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
                probe = container.get(probe_name)
                http_get = probe.get("httpGet") if isinstance(probe, dict) else None
                if isinstance(http_get, dict):
                    problems += _port_num_or_name(http_get.get("port"), "%s.%s.httpGet.port" % (cpath, probe_name))
    if spec.get("nodeSelector") is not None:
        problems += _label_map_problems(spec["nodeSelector"], path + ".nodeSelector")
    problems += _node_affinity_problems(spec.get("affinity"), path + ".affinity")
    problems += _toleration_problems(spec.get("tolerations"), path + ".tolerations")
    policy = spec.get("restartPolicy")
    if policy not in ("Always", "OnFailure", "Never"):
        problems.append(errors.not_supported(path + ".restartPolicy", policy, ["Always", "OnFailure", "Never"]))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)):
        problems.append(errors.invalid(path + ".terminationGracePeriodSeconds", grace, "must be an integer"))
    return problems


class PodStrategy(Strategy):
    type_node = ts.struct(metadata=ts.OBJECT_META, spec=POD_SPEC, status=POD_STATUS)
    status_subresource = True
    return_deleted_object = True
    field_labels = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                    "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")
    indexed_fields = {"spec.nodeName": lambda obj: (obj.get("spec") or {}).get("nodeName", "")}

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None}, "spec": {"containers": None}, "status": {}}

    def decode(self, obj, rtype):
        spec = obj.get("spec")
        if isinstance(spec, dict):
            for key in ("containers", "initContainers"):
                for container in spec.get(key) or []:
                    if isinstance(container, dict):
                        _check_quantities("Pod", container.get("resources"), "")
            default_pod_spec(spec)
        status = obj.get("status")
        if isinstance(status, dict):
            default_pod_status_conditions(status)
            if status.get("podIP") and not status.get("podIPs"):
                status["podIPs"] = [{"ip": status["podIP"]}]

    def prepare_create(self, obj, ctx):
        spec = obj.setdefault("spec", {})
        obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(isinstance(t, dict) and t.get("key") == key for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": 300})
        if spec.get("automountServiceAccountToken", True) is not False:
            self._inject_service_account_volume(spec)

    @staticmethod
    def _inject_service_account_volume(spec):
        mount_path = "/var/run/secrets/kubernetes.io/serviceaccount"
        containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
        if any(m.get("mountPath") == mount_path for c in containers for m in c.get("volumeMounts") or []):
            return
        name = "kube-api-access-" + random_suffix()
        # The recorded cluster (see kube-fixtures) also projects an OpenShift service CA; kept for fidelity.
        spec.setdefault("volumes", []).append({"name": name, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                          "fieldPath": "metadata.namespace"}}]}},
            {"configMap": {"name": "openshift-service-ca.crt",
                           "items": [{"key": "service-ca.crt", "path": "service-ca.crt"}]}}]}})
        for container in containers:
            container.setdefault("volumeMounts", []).append({"name": name, "readOnly": True,
                                                             "mountPath": mount_path})

    def validate(self, obj, old, rtype):
        problems = super().validate(obj, old, rtype)
        problems += validate_pod_spec(obj.get("spec"), "spec")
        if old is not None and isinstance(obj.get("spec"), dict) and isinstance(old.get("spec"), dict):
            if _pod_spec_mutable_view(obj["spec"]) != _pod_spec_mutable_view(old["spec"]):
                problems.append(errors.forbidden("spec", _POD_UPDATE_FORBIDDEN))
        return problems

    def grace_period(self, obj, options):
        spec = obj.get("spec") or {}
        if options.grace_period is not None:
            period = options.grace_period
        else:
            period = spec.get("terminationGracePeriodSeconds", 30)
        if not spec.get("nodeName"):
            return 0
        if (obj.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
            return 0
        return max(0, int(period))


def _pod_spec_mutable_view(spec):
    view = deepcopy(spec)
    for key in ("containers", "initContainers"):
        for container in view.get(key) or []:
            if isinstance(container, dict):
                container.pop("image", None)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        view.pop(key, None)
    return view


# ---------------------------------------------------------------------------------------- services

class ServiceStrategy(Strategy):
    type_node = ts.struct(metadata=ts.OBJECT_META,
                          spec=ts.struct(ports=ts.keyed_list(["port", "protocol"]), selector=ts.atomic_map(),
                                         clusterIPs=ts.atomic_list(), ipFamilies=ts.atomic_list(),
                                         externalIPs=ts.atomic_list()),
                          status=ts.struct(conditions=ts.keyed_list(["type"]),
                                           loadBalancer=ts.struct(ingress=ts.atomic_list())))
    status_subresource = True
    allow_create_on_update = True
    name_rule = "dns1035"

    def __init__(self):
        self._next_ip = 10 * 256 + 10

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None}, "spec": {}, "status": {"loadBalancer": {}}}

    def decode(self, obj, rtype):
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] in ("ClusterIP", "NodePort", "LoadBalancer"):
            spec.setdefault("internalTrafficPolicy", "Cluster")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                if "targetPort" not in port and "port" in port:
                    port["targetPort"] = port["port"]

    def prepare_create(self, obj, ctx):
        spec = obj.setdefault("spec", {})
        obj["status"] = {"loadBalancer": {}}
        if spec.get("type") == "ExternalName":
            return
        if spec.get("clusterIP") != "None" and not spec.get("clusterIP"):
            self._next_ip += 1
            spec["clusterIP"] = "10.96.%d.%d" % ((self._next_ip // 256) % 256, self._next_ip % 256)
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")

    def prepare_update(self, new, old, ctx):
        spec, old_spec = new.setdefault("spec", {}), old.get("spec") or {}
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if key not in spec and key in old_spec:
                spec[key] = deepcopy(old_spec[key])

    def validate(self, obj, old, rtype):
        problems = super().validate(obj, old, rtype)
        meta_count = len(problems)
        spec = obj.get("spec") or {}
        immutable = []
        if old is not None:
            old_ip = (old.get("spec") or {}).get("clusterIP")
            if old_ip and spec.get("type") != "ExternalName" and spec.get("clusterIP") != old_ip:
                immutable.append(errors.invalid("spec.clusterIP", spec.get("clusterIP"), "field is immutable"))
        ports = spec.get("ports") or []
        if spec.get("type") != "ExternalName" and not ports and spec.get("clusterIP") != "None":
            problems.append(errors.required("spec.ports", ""))
        names = set()
        for i, port in enumerate(ports):
            ppath = "spec.ports[%d]" % i
            if not isinstance(port, dict):
                problems.append(errors.invalid(ppath, port, "must be an object"))
                continue
            name = port.get("name")
            if len(ports) > 1 and not name:
                problems.append(errors.required(ppath + ".name", ""))
            elif name:
                for message in name_problems(name, "label") if isinstance(name, str) else ["must be a string"]:
                    problems.append(errors.invalid(ppath + ".name", name, message))
                if name in names:
                    problems.append(errors.duplicate(ppath + ".name", name))
                else:
                    names.add(name)
            problems += [errors.invalid(ppath + ".port", port.get("port"), m)
                         for m in port_number_problems(port.get("port"))]
            if not port.get("protocol"):
                problems.append(errors.required(ppath + ".protocol", ""))
            elif port["protocol"] not in _PORT_PROTOCOLS:
                problems.append(errors.not_supported(ppath + ".protocol", port["protocol"], _PORT_PROTOCOLS))
            problems += _port_num_or_name(port.get("targetPort"), ppath + ".targetPort")
        if spec.get("selector") is not None:
            problems += _label_map_problems(spec["selector"], "spec.selector")
        if spec.get("sessionAffinity") not in ("ClientIP", "None"):
            problems.append(errors.not_supported("spec.sessionAffinity", spec.get("sessionAffinity"),
                                                 ["ClientIP", "None"]))
        if spec.get("type") not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
            problems.append(errors.not_supported("spec.type", spec.get("type"),
                                                 ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]))
        if spec.get("type") == "ClusterIP":
            for i, port in enumerate(ports):
                if isinstance(port, dict) and port.get("nodePort"):
                    problems.append(errors.forbidden("spec.ports[%d].nodePort" % i,
                                                     "may not be used when `type` is 'ClusterIP'"))
        seen = set()
        for i, port in enumerate(ports):
            if not isinstance(port, dict):
                continue
            key = (port.get("protocol"), port.get("port"))
            if key in seen:
                problems.append(errors.duplicate("spec.ports[%d]" % i, errors.GoLiteral(
                    'core.ServicePort{Name:"", Protocol:%s, AppProtocol:(*string)(nil), Port:%s, '
                    'TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:""}, NodePort:0}'
                    % (errors.go_quote(str(key[0] or "")), errors.go_value(key[1])))))
            seen.add(key)
        # ValidateServiceUpdate: ObjectMeta, then the immutable cluster IP, then ValidateService.
        return problems[:meta_count] + immutable + problems[meta_count:]


# ------------------------------------------------------------------------------------------- nodes

class NodeStrategy(Strategy):
    type_node = ts.struct(metadata=ts.OBJECT_META,
                          spec=ts.struct(taints=ts.atomic_list(), podCIDRs=ts.set_list()),
                          status=ts.struct(conditions=ts.keyed_list(["type"]), addresses=ts.keyed_list(["type"]),
                                           capacity=ts.smap(), allocatable=ts.smap(), images=ts.atomic_list(),
                                           volumesAttached=ts.atomic_list(), volumesInUse=ts.atomic_list()))
    status_subresource = True
    keep_status_on_create = True
    field_labels = ("spec.unschedulable",)

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None}, "spec": {}, "status": _empty_node_status()}

    def decode(self, obj, rtype):
        if isinstance(obj.get("status"), dict):
            _check_quantities("Node", obj["status"], "status")

    def prepare_create(self, obj, ctx):
        spec = obj.setdefault("spec", {})
        status = obj.setdefault("status", {})
        for key, value in _empty_node_status().items():
            status.setdefault(key, value)
        if not _node_ready(obj):
            taints = spec.setdefault("taints", [])
            if not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints if isinstance(t, dict)):
                taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})

    def after_status_update(self, obj):
        # The node lifecycle controller lifts the not-ready taint once the kubelet reports Ready.
        taints = (obj.get("spec") or {}).get("taints") or []
        if _node_ready(obj) and any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints):
            kept = [t for t in taints if t.get("key") != "node.kubernetes.io/not-ready"]
            if kept:
                obj["spec"]["taints"] = kept
            else:
                obj["spec"].pop("taints")
            return True
        return False


def _empty_node_status():
    return {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {k: "" for k in ("architecture", "bootID", "containerRuntimeVersion", "kernelVersion",
                                         "kubeProxyVersion", "kubeletVersion", "machineID", "operatingSystem",
                                         "osImage", "systemUUID")}}


def _node_ready(obj):
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


# -------------------------------------------------------------------------------------- namespaces

class NamespaceStrategy(Strategy):
    type_node = ts.struct(metadata=ts.OBJECT_META, spec=ts.struct(finalizers=ts.atomic_list()),
                          status=ts.struct(conditions=ts.keyed_list(["type"])))
    status_subresource = True
    name_rule = "label"
    field_labels = ("status.phase",)

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None}, "spec": {}, "status": {}}

    def decode(self, obj, rtype):
        name = (obj.get("metadata") or {}).get("name")
        if name:
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name

    def prepare_create(self, obj, ctx):
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}

    def prepare_update(self, new, old, ctx):
        new["spec"] = deepcopy(old.get("spec") or {})


# --------------------------------------------------------------------------- configmaps and secrets

_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _validate_config_keys(data, path):
    problems = []
    for key in (data or {}):
        if not _CONFIG_KEY.match(key) or len(key) > 253:
            problems.append(errors.invalid("%s[%s]" % (path, key), key,
                                           "a valid config key must consist of alphanumeric characters, '-', '_' "
                                           "or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used "
                                           "for validation is '[-._a-zA-Z0-9]+')"))
    return problems


class ConfigMapStrategy(Strategy):
    type_node = ts.struct(metadata=ts.OBJECT_META, data=ts.smap(), binaryData=ts.smap())

    def validate(self, obj, old, rtype):
        problems = super().validate(obj, old, rtype)
        for field in ("data", "binaryData"):
            value = obj.get(field)
            if value is not None and (not isinstance(value, dict)
                                      or not all(isinstance(v, str) for v in value.values())):
                problems.append(errors.invalid(field, value, "must be a map of strings"))
            else:
                problems += _validate_config_keys(value, field)
        return problems


class SecretStrategy(Strategy):
    type_node = ts.struct(metadata=ts.OBJECT_META, data=ts.smap(), stringData=ts.smap())
    field_labels = ("type",)

    def decode(self, obj, rtype):
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            data = obj.setdefault("data", {})
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
        obj.setdefault("type", "Opaque")

    def validate(self, obj, old, rtype):
        problems = super().validate(obj, old, rtype)
        for key, value in (obj.get("data") or {}).items():
            try:
                base64.b64decode(value, validate=True)
            except (ValueError, TypeError):
                problems.append(errors.invalid("data[%s]" % key, "<secret contents redacted>",
                                               "must be base64 encoded"))
        problems += _validate_config_keys(obj.get("data"), "data")
        return problems


class PersistentVolumeClaimStrategy(Strategy):
    type_node = ts.struct(metadata=ts.OBJECT_META,
                          spec=ts.struct(accessModes=ts.atomic_list(),
                                         resources=ts.struct(requests=ts.smap(), limits=ts.smap())),
                          status=ts.struct(conditions=ts.keyed_list(["type"]), capacity=ts.smap(),
                                           accessModes=ts.atomic_list()))
    status_subresource = True

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None}, "spec": {"resources": {}}, "status": {}}

    def decode(self, obj, rtype):
        spec = obj.get("spec")
        if isinstance(spec, dict):
            _check_quantities("PersistentVolumeClaim", spec.get("resources"), "spec.resources")
            spec.setdefault("volumeMode", "Filesystem")

    def prepare_create(self, obj, ctx):
        obj["status"] = {"phase": "Pending"}

    def validate(self, obj, old, rtype):
        problems = super().validate(obj, old, rtype)
        spec = obj.get("spec") or {}
        if not spec.get("accessModes"):
            problems.append(errors.required("spec.accessModes", ""))
        if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
            problems.append(errors.required("spec.resources[storage]", ""))
        return problems


# ------------------------------------------------------------------------------------------- leases

class LeaseStrategy(Strategy):
    type_node = ts.struct(metadata=ts.OBJECT_META, spec=ts.struct())
    allow_create_on_update = True

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None}, "spec": {}}

    def validate(self, obj, old, rtype):
        problems = super().validate(obj, old, rtype)
        spec = obj.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            problems.append(errors.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
        transitions = spec.get("leaseTransitions")
        if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
            problems.append(errors.invalid("spec.leaseTransitions", transitions,
                                           "must be greater than or equal to 0"))
        return problems


# ------------------------------------------------------------------------------------------- events

_CORE_TO_NEW = [("involvedObject", "regarding"), ("message", "note"), ("reportingComponent", "reportingController"),
                ("source", "deprecatedSource"), ("firstTimestamp", "deprecatedFirstTimestamp"),
                ("lastTimestamp", "deprecatedLastTimestamp"), ("count", "deprecatedCount")]
_SAME = ("action", "reason", "type", "eventTime", "series", "related", "reportingInstance")


class EventStrategy(Strategy):
    """core/v1 events are stored; events.k8s.io/v1 is a converted view of the same objects."""

    allow_create_on_update = True
    field_labels = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                    "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                    "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")
    core_node = ts.struct(metadata=ts.OBJECT_META, involvedObject=ts.atomic_struct(), related=ts.atomic_struct(),
                          source=ts.struct(), series=ts.struct())
    new_node = ts.struct(metadata=ts.OBJECT_META, regarding=ts.atomic_struct(), related=ts.atomic_struct(),
                         deprecatedSource=ts.struct(), series=ts.struct())

    def __init__(self, new_api):
        self.new_api = new_api
        self.type_node = self.new_node if new_api else self.core_node
        if new_api:
            self.field_labels = ("regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                                 "regarding.apiVersion", "reason", "reportingController", "type")

    def qualified_kind(self, rtype):
        return "", "Event"

    def skeleton(self, rtype):
        if self.new_api:
            return {"metadata": {"creationTimestamp": None}, "eventTime": None, "deprecatedSource": {},
                    "deprecatedFirstTimestamp": None, "deprecatedLastTimestamp": None}
        return {"metadata": {"creationTimestamp": None}, "involvedObject": {}, "source": {},
                "firstTimestamp": None, "lastTimestamp": None, "eventTime": None, "reportingComponent": "",
                "reportingInstance": ""}

    def decode(self, obj, rtype):
        if self.new_api:
            obj.setdefault("eventTime", None)
            obj.setdefault("deprecatedSource", {})
            obj.setdefault("deprecatedFirstTimestamp", None)
            obj.setdefault("deprecatedLastTimestamp", None)
        else:
            for key, value in (("involvedObject", {}), ("source", {}), ("firstTimestamp", None),
                               ("lastTimestamp", None), ("eventTime", None), ("reportingComponent", ""),
                               ("reportingInstance", "")):
                obj.setdefault(key, value)

    def validate(self, obj, old, rtype):
        problems = super().validate(obj, old, rtype)
        if not self.new_api:
            involved_ns = (obj.get("involvedObject") or {}).get("namespace")
            ns = (obj.get("metadata") or {}).get("namespace")
            if involved_ns and ns and involved_ns != ns:
                problems.append(errors.invalid("involvedObject.namespace", involved_ns,
                                               "does not match event.namespace"))
            return problems
        if not obj.get("eventTime"):
            problems.append(errors.required("eventTime", ""))
        if obj.get("type") not in ("Normal", "Warning"):
            problems.append(errors.not_supported("type", obj.get("type", ""), ["Normal", "Warning"]))
        for field in ("reportingController", "reportingInstance", "action", "reason"):
            if not obj.get(field):
                problems.append(errors.required(field, ""))
        if len(obj.get("note") or "") > 1024:
            problems.append(errors.too_long("note", 1024))
        return problems

    def to_view(self, obj, rtype):
        if not self.new_api:
            return super().to_view(obj, rtype)
        view = {"apiVersion": rtype.api_version, "kind": "Event", "metadata": obj.get("metadata", {})}
        for key in _SAME:
            if obj.get(key) not in (None, "") or key == "eventTime":
                view[key] = obj.get(key)
        for core_key, new_key in _CORE_TO_NEW:
            value = obj.get(core_key)
            if new_key in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp"):
                view[new_key] = value
            elif new_key == "deprecatedSource":
                view[new_key] = value or {}
            elif value not in (None, "", {}) or new_key == "regarding":
                view[new_key] = value if value is not None else {}
        return view

    def from_view(self, obj, rtype):
        if not self.new_api:
            return obj
        core = {"apiVersion": "v1", "kind": "Event", "metadata": obj.get("metadata", {})}
        for key in _SAME:
            if key in obj:
                core[key] = obj[key]
        for core_key, new_key in _CORE_TO_NEW:
            if new_key in obj:
                core[core_key] = obj[new_key]
        for key, value in (("involvedObject", {}), ("source", {}), ("firstTimestamp", None),
                           ("lastTimestamp", None), ("eventTime", None), ("reportingComponent", ""),
                           ("reportingInstance", "")):
            core.setdefault(key, value)
        return core


# --------------------------------------------------------------------------------------- workloads

class WorkloadStrategy(Strategy):
    """apps/v1 kinds: stored and validated lightly, with status and scale subresources; no controllers."""

    type_node = ts.struct(metadata=ts.OBJECT_META,
                          spec=ts.struct(selector=ts.atomic_struct(), template=POD_TEMPLATE),
                          status=ts.struct(conditions=ts.keyed_list(["type"])))
    has_generation = True
    status_subresource = True
    scale = ("spec.replicas", "status.replicas", None)

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None},
                "spec": {"selector": None, "template": {"metadata": {"creationTimestamp": None},
                                                        "spec": {"containers": None}}}, "status": {}}

    def decode(self, obj, rtype):
        spec = obj.get("spec")
        if isinstance(spec, dict):
            if rtype.kind != "DaemonSet":
                spec.setdefault("replicas", 1)
            template_spec = (spec.get("template") or {}).get("spec")
            if isinstance(template_spec, dict):
                default_pod_spec(template_spec)

    def prepare_create(self, obj, ctx):
        obj["status"] = {}

    def validate(self, obj, old, rtype):
        problems = super().validate(obj, old, rtype)
        spec = obj.get("spec") or {}
        if not isinstance(spec.get("selector"), dict):
            problems.append(errors.required("spec.selector", ""))
        problems += validate_pod_spec((spec.get("template") or {}).get("spec"), "spec.template.spec")
        return problems


def builtin_types():
    """The built-in resources the test server serves, in discovery order."""
    pod = PodStrategy()
    events_core = EventStrategy(False)
    workloads = WorkloadStrategy()
    return [
        ResourceType("", "v1", "namespaces", "Namespace", NamespaceStrategy(), namespaced=False,
                     short_names=["ns"], subresources=["status", "finalize"],
                     verbs=["create", "delete", "get", "list", "patch", "update", "watch"]),
        ResourceType("", "v1", "pods", "Pod", pod, short_names=["po"], subresources=["status", "binding"],
                     categories=["all"]),
        ResourceType("", "v1", "services", "Service", ServiceStrategy(), short_names=["svc"],
                     subresources=["status"], categories=["all"],
                     verbs=["create", "delete", "get", "list", "patch", "update", "watch"]),
        ResourceType("", "v1", "nodes", "Node", NodeStrategy(), namespaced=False, short_names=["no"],
                     subresources=["status"]),
        ResourceType("", "v1", "configmaps", "ConfigMap", ConfigMapStrategy(), short_names=["cm"]),
        ResourceType("", "v1", "secrets", "Secret", SecretStrategy()),
        ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", PersistentVolumeClaimStrategy(),
                     short_names=["pvc"], subresources=["status"]),
        ResourceType("", "v1", "events", "Event", events_core, short_names=["ev"], storage="/events"),
        ResourceType("apps", "v1", "deployments", "Deployment", workloads, short_names=["deploy"],
                     subresources=["status", "scale"], categories=["all"]),
        ResourceType("apps", "v1", "statefulsets", "StatefulSet", workloads, short_names=["sts"],
                     subresources=["status", "scale"], categories=["all"]),
        ResourceType("apps", "v1", "replicasets", "ReplicaSet", workloads, short_names=["rs"],
                     subresources=["status", "scale"], categories=["all"]),
        ResourceType("events.k8s.io", "v1", "events", "Event", EventStrategy(True), short_names=["ev"],
                     storage="/events"),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease", LeaseStrategy()),
    ]

