"""Pure kubelet logic of the process node: image map, command line, environment, volumes, IPs, scheduling.

Nothing here does I/O except `ImageMap.load`; lookups of ConfigMaps, Secrets and Services are passed in as
callables so the functions are unit-tested without a server.
"""

import ipaddress
import json
import os
import re

import yaml

from .. import quantity

_SERVICE_HOST = re.compile(
    r"\b(?P<name>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)\.(?P<ns>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)\.svc"
    r"(?:\.cluster\.local)?\b(?::(?P<port>\d+))?")


class PodSetupError(Exception):
    """The pod cannot be started as specified; `reason` is the kubelet-style waiting reason."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason
        self.message = message


# ------------------------------------------------------------------------------------------ image map


class ImageMap:
    """Maps container images to host binaries, and container paths (a pod's `command`) to host paths.

    File format (JSON or YAML), either flat `{image: binary}` or
    `{images: {image: binary}, paths: {container path: host path}}`. An image may be given with or without
    its tag; the exact spelling wins."""

    def __init__(self, images=None, paths=None, source="<none>"):
        self.images = dict(images or {})
        self.paths = dict(paths or {})
        self.source = source

    @classmethod
    def load(cls, path):
        if not path:
            return cls()
        with open(path) as fh:
            text = fh.read()
        try:
            doc = json.loads(text)
        except ValueError:
            doc = yaml.safe_load(text)
        if not isinstance(doc, dict):
            raise ValueError("%s: the image map must be a mapping of image -> binary" % path)
        if "images" in doc or "paths" in doc:
            unknown = set(doc) - {"images", "paths"}
            if unknown:
                raise ValueError("%s: unknown keys %s (expected images, paths)" % (path, sorted(unknown)))
            images, paths = doc.get("images") or {}, doc.get("paths") or {}
        else:
            images, paths = doc, {}
        for section, mapping in (("images", images), ("paths", paths)):
            if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
                raise ValueError("%s: %s must map strings to host paths" % (path, section))
        base = os.path.dirname(os.path.abspath(path))
        resolve = (lambda p: p if os.path.isabs(p) else os.path.normpath(os.path.join(base, p)))
        return cls({k: resolve(v) for k, v in images.items()}, {k: resolve(v) for k, v in paths.items()}, path)

    def binary_for(self, image):
        if image in self.images:
            return self.images[image]
        untagged = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        return self.images.get(untagged)


def expand(text, env):
    """Kubernetes' $(VAR) expansion: defined variables are replaced, $$ escapes, anything else is kept."""
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:end + 1])
                    i = end + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)


def command_line(container, image_map):
    """argv for a container: the image's binary (or the command, mapped to the host) plus args.

    Raises PodSetupError when neither the image nor the command can be run on this host."""
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    image = container.get("image") or ""
    if command:
        first = image_map.paths.get(command[0])
        if first is None and command[0] in (_entrypoint_names(image_map, image)):
            first = image_map.binary_for(image)
        if first is None:
            first = command[0]
        if not os.path.isabs(first) and os.sep not in first:
            return [first] + command[1:] + args
        if not os.path.exists(first):
            raise PodSetupError("RunContainerError", "command %s does not exist on this host; add it to the "
                                                     "image map's paths" % command[0])
        return [first] + command[1:] + args
    binary = image_map.binary_for(image)
    if binary is None:
        raise PodSetupError("ErrImageNeverPull", "image %s is not in the process node's image map (%s)"
                            % (image, image_map.source))
    if not os.path.exists(binary):
        raise PodSetupError("ErrImageNeverPull", "image %s maps to %s, which does not exist (build it first)"
                            % (image, binary))
    return [binary] + args


def _entrypoint_names(image_map, image):
    binary = image_map.binary_for(image)
    return {os.path.basename(binary)} if binary else set()


# ---------------------------------------------------------------------------------------- environment


def field_ref(pod, path, pod_ip, host_ip):
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    values = {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", ""),
              "metadata.uid": meta.get("uid", ""), "spec.nodeName": spec.get("nodeName", ""),
              "spec.serviceAccountName": spec.get("serviceAccountName", ""), "status.podIP": pod_ip,
              "status.podIPs": pod_ip, "status.hostIP": host_ip, "status.hostIPs": host_ip}
    if path not in values:
        raise PodSetupError("CreateContainerConfigError", "unsupported fieldRef %s" % path)
    return values[path]


def resource_ref(container, ref):
    resource = ref.get("resource", "")
    section, _, name = resource.partition(".")
    resources = (container.get("resources") or {}).get(section) or {}
    divisor = quantity.parse(ref.get("divisor") or "1")
    if name not in resources:
        return "0"
    value = quantity.parse(resources[name]) / divisor
    return str(int(-(-value // 1)))  # kubelet rounds up


def container_env(pod, container, base_env, pod_ip, host_ip, lookup_config):
    """The environment of the container's process. lookup_config(kind, name) -> data dict or None."""
    env = dict(base_env)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        for kind in ("configMapRef", "secretRef"):
            ref = source.get(kind)
            if ref is None:
                continue
            data = lookup_config(kind, ref.get("name"))
            if data is None:
                if ref.get("optional"):
                    continue
                raise PodSetupError("CreateContainerConfigError", "%s %s not found" % (
                    "configmap" if kind == "configMapRef" else "secret", ref.get("name")))
            for key, value in data.items():
                env[prefix + key] = value
    for item in container.get("env") or []:
        name = item.get("name")
        if "value" in item:
            env[name] = expand(item.get("value") or "", env)
            continue
        source = item.get("valueFrom") or {}
        if "fieldRef" in source:
            env[name] = field_ref(pod, source["fieldRef"].get("fieldPath", ""), pod_ip, host_ip)
        elif "resourceFieldRef" in source:
            env[name] = resource_ref(container, source["resourceFieldRef"])
        else:
            handled = False
            for kind, ref_key in (("configMapKeyRef", "configMapRef"), ("secretKeyRef", "secretRef")):
                ref = source.get(kind)
                if ref is None:
                    continue
                handled = True
                data = lookup_config(ref_key, ref.get("name")) or {}
                if ref.get("key") in data:
                    env[name] = data[ref["key"]]
                elif not ref.get("optional"):
                    raise PodSetupError("CreateContainerConfigError", "couldn't find key %s in %s %s" % (
                        ref.get("key"), "ConfigMap" if kind == "configMapKeyRef" else "Secret", ref.get("name")))
            if not handled:
                env[name] = ""
    return env


# ------------------------------------------------------------------------------------------ volumes


def volume_dirs(pod, work_dir):
    """{volume name: host directory} for the volumes a pod declares."""
    meta = pod.get("metadata") or {}
    pod_dir = os.path.join(work_dir, "pods", "%s_%s_%s" % (meta.get("namespace"), meta.get("name"),
                                                           meta.get("uid", "")[:8]))
    out = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = volume.get("name")
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"].get("claimName")
            out[name] = os.path.join(work_dir, "pvc", meta.get("namespace", ""), claim)
        elif "hostPath" in volume:
            out[name] = volume["hostPath"].get("path")
        else:
            out[name] = os.path.join(pod_dir, "volumes", name)
    return out


def mount_map(container, dirs):
    """[(mountPath, host path)] longest first, for rewriting container paths."""
    mounts = []
    for mount in container.get("volumeMounts") or []:
        host = dirs.get(mount.get("name"))
        if host:
            if mount.get("subPath"):
                host = os.path.join(host, mount["subPath"])
            mounts.append((mount.get("mountPath", "").rstrip("/") or "/", host))
    return sorted(mounts, key=lambda m: -len(m[0]))


def rewrite_paths(text, mounts):
    """Replaces container mount paths inside an argument (`--journal=/data/j`) with their host paths."""
    for mount_path, host in mounts:
        pattern = re.compile(r"(?<![\w/.-])" + re.escape(mount_path) + r"(?=/|$|[^\w.-])")
        text = pattern.sub(lambda _m, h=host: h, text)
    return text


def config_volume_files(volume, data):
    """{relative path: content} for a configMap/secret volume given the object's data."""
    source = volume.get("configMap") or volume.get("secret") or {}
    items = source.get("items")
    if items:
        return {item["path"]: data[item["key"]] for item in items if item.get("key") in data}
    return dict(data)


# ------------------------------------------------------------------------------------------ services


def service_targets(text, lookup_endpoint):
    """Rewrites `name.ns.svc[.cluster.local][:port]` to the backing pod's `ip[:targetPort]`.

    lookup_endpoint(ns, name, port) -> (ip, port) or None. Returns (text, unresolved names)."""
    unresolved = []

    def replace(m):
        port = int(m.group("port")) if m.group("port") else None
        found = lookup_endpoint(m.group("ns"), m.group("name"), port)
        if found is None:
            unresolved.append("%s.%s" % (m.group("name"), m.group("ns")))
            return m.group(0)
        ip, target = found
        return "%s:%s" % (ip, target) if port is not None else ip

    return _SERVICE_HOST.sub(replace, text), unresolved


# ------------------------------------------------------------------------------------------ addresses


class IpAllocator:
    """Hands out loopback addresses from a base upward; the lowest free address first. Not thread-safe."""

    def __init__(self, base="127.0.0.2"):
        self.base = int(ipaddress.IPv4Address(base))
        if not ipaddress.IPv4Address(base).is_loopback:
            raise ValueError("--ip-base must be a loopback address (127.x.y.z), got %s" % base)
        self.used = {}  # key -> int
        self.free = []

    def allocate(self, key):
        if key in self.used:
            return str(ipaddress.IPv4Address(self.used[key]))
        taken = set(self.used.values())
        candidate = self.base
        while candidate in taken:
            candidate += 1
        if candidate >= int(ipaddress.IPv4Address("127.255.255.255")):
            raise RuntimeError("loopback addresses exhausted")
        self.used[key] = candidate
        return str(ipaddress.IPv4Address(candidate))

    def release(self, key):
        self.used.pop(key, None)


# ------------------------------------------------------------------------------------------ scheduling


def pod_requests(pod):
    cpu = memory = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        if "cpu" in requests:
            cpu += quantity.cpu_millis(requests["cpu"])
        if "memory" in requests:
            memory += quantity.as_int(requests["memory"])
    return cpu, memory


def tolerates(pod, taints):
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        ok = False
        for tol in tolerations:
            if tol.get("effect") and tol["effect"] != taint.get("effect"):
                continue
            if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint.get("key")):
                ok = True
            elif tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
                ok = True
        if not ok:
            return False
    return True


def _requirement_holds(requirement, value):
    """One nodeSelectorRequirement against a label or field value (None: absent)."""
    op = requirement.get("operator")
    values = requirement.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        try:
            number, bound = int(value), int(values[0])
        except (TypeError, ValueError, IndexError):
            return False
        return number > bound if op == "Gt" else number < bound
    return False


def affinity_allows(pod, node_name, node_labels):
    """requiredDuringSchedulingIgnoredDuringExecution node affinity: any term whose matchExpressions
    (labels) and matchFields (metadata.name only, as Kubernetes supports) all hold. No affinity: True."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    for term in required.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not expressions and not fields:
            continue  # an empty term matches nothing
        if all(_requirement_holds(r, node_labels.get(r.get("key"))) for r in expressions) and \
                all(_requirement_holds(r, node_name if r.get("key") == "metadata.name" else None) for r in fields):
            return True
    return False


def fits(pod, node_labels, taints, free_cpu_millis, free_memory, free_pods, node_name=None):
    """Whether this node may run the pod: nodeSelector, required node affinity (when the node's name is
    given), taints, and requested CPU/memory/pod count."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(node_labels.get(k) != v for k, v in selector.items()):
        return False
    if node_name is not None and not affinity_allows(pod, node_name, node_labels):
        return False
    if not tolerates(pod, taints):
        return False
    cpu, memory = pod_requests(pod)
    return free_pods > 0 and cpu <= free_cpu_millis and memory <= free_memory
