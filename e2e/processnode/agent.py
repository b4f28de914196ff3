"""The process node: a kubelet stand-in for one Node that runs pods as local processes.

NodeAgent registers the Node, keeps its Lease fresh, watches the pods bound to it and hands each to a
PodSupervisor (one thread per pod: start the first container's command, probe it, restart it per
restartPolicy, stop it on deletion and confirm with a gracePeriodSeconds=0 delete). In simulated mode pods are
only marked Running and Ready by a small worker pool, nothing runs. With scheduling enabled, a Scheduler binds
unscheduled pods that fit this node. Threads: one informer per watch, one supervisor per real pod, the
scheduler, the heartbeat and the simulated workers; shared maps are guarded by `NodeAgent._mu`, and no lock
is held during an API call.
"""

import base64
import http.client
import os
import queue
import threading
from urllib.parse import urlsplit

from .. import quantity
from ..client import ApiException
from . import podspec
from .informer import Informer
from .runner import Launcher, ProcessTable
from .scheduler import Scheduler
from .supervisor import PodSupervisor
from .util import conditions, is_ready, log, named_port, utc_micro_now, utc_now

_DEFAULT_PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH", "PYTHONPATH",
                     "PYTHONDONTWRITEBYTECODE")


class NodeConfig:
    def __init__(self, node_name, cpu="8", memory="16Gi", pods=110, labels=None, taints=None, image_map=None,
                 log_dir="pod-logs", work_dir=None, ip_base="127.0.0.2", simulated=False, schedule=False,
                 heartbeat=10.0, probe_period_cap=None, workers=8, pass_env=(), service_wait=30.0,
                 shutdown_grace=5.0):
        self.node_name = node_name
        self.cpu = str(cpu)
        self.memory = str(memory)
        self.pods = int(pods)
        self.labels = dict(labels or {})
        self.taints = list(taints or [])
        self.image_map = image_map or podspec.ImageMap()
        self.log_dir = log_dir
        self.work_dir = work_dir or os.path.join(log_dir, "volumes")
        self.ip_base = ip_base
        self.simulated = simulated
        self.schedule = schedule
        self.heartbeat = heartbeat
        self.probe_period_cap = probe_period_cap
        self.workers = workers
        self.pass_env = tuple(_DEFAULT_PASS_ENV) + tuple(pass_env)
        self.service_wait = service_wait
        self.shutdown_grace = shutdown_grace


class NodeAgent:
    def __init__(self, client, config, server_url=""):
        self.client = client
        self.config = config
        self.server_url = server_url
        self.stop_event = threading.Event()
        self._mu = threading.Lock()
        self.ips = podspec.IpAllocator(config.ip_base)
        self.supervisors = {}  # uid -> PodSupervisor
        self.bound = {}  # uid -> (cpu millis, memory bytes) of non-terminal pods on this node
        self.launcher = None if config.simulated else Launcher()
        self.processes = ProcessTable(self.launcher) if self.launcher else None
        self.threads = []
        self.informers = []
        self._sim_queue = queue.Queue()
        self._sim_pending = set()
        self._sim_done = {}
        self._pods = {}  # uid -> latest pod (simulated mode)
        self.scheduler = Scheduler(self) if config.schedule else None
        self.node_labels = dict(config.labels)
        self.node_labels.setdefault("kubernetes.io/hostname", config.node_name)
        self.node_labels.setdefault("kubernetes.io/os", "linux")
        self.node_labels.setdefault("sluice.dev/process-node", "true")
        if config.schedule:
            self.node_labels[Scheduler.SCHEDULER_LABEL] = "true"
        self.base_env = {k: os.environ[k] for k in config.pass_env if k in os.environ}
        split = urlsplit(server_url) if server_url else None
        if split is not None and split.hostname:
            self.base_env["KUBERNETES_SERVICE_HOST"] = split.hostname
            self.base_env["KUBERNETES_SERVICE_PORT"] = str(split.port or (443 if split.scheme == "https" else 80))

    # ------------------------------------------------------------------------------------------ paths

    def pod_path(self, pod):
        meta = pod["metadata"]
        return "/api/v1/namespaces/%s/pods/%s" % (meta["namespace"], meta["name"])

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self):
        os.makedirs(self.config.log_dir, exist_ok=True)
        os.makedirs(self.config.work_dir, exist_ok=True)
        self.register()
        pods = Informer(self.client, "/api/v1/pods", {"fieldSelector": "spec.nodeName=" + self.config.node_name},
                        self._sync_pods, self._pod_event, self.stop_event, "pods")
        self.informers.append(pods)
        heartbeat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        self.threads.append(heartbeat)
        if self.config.simulated:
            for i in range(max(1, self.config.workers)):
                self.threads.append(threading.Thread(target=self._sim_worker, name="sim-%d" % i, daemon=True))
        for thread in self.informers + self.threads:
            thread.start()
        if self.scheduler is not None:
            pods.synced.wait(30)
            self.scheduler.start()
        return self

    def wait(self):
        self.stop_event.wait()

    def stop(self):
        """Stops watching and kills every pod process (pods stay in the API, as with a stopped kubelet)."""
        self.stop_event.set()
        for informer in self.informers:
            informer.interrupt()
        if self.scheduler is not None:
            self.scheduler.interrupt()
        with self._mu:
            supervisors = list(self.supervisors.values())
        for sup in supervisors:
            sup.shutdown()
        for sup in supervisors:
            sup.join(self.config.shutdown_grace + 5)
        if self.processes is not None:
            self.processes.kill_all(self.config.shutdown_grace)
            self.launcher.stop()
        if self.scheduler is not None:
            self.scheduler.wake()

    # ------------------------------------------------------------------------------------------ node

    def _node_status(self):
        capacity = {"cpu": self.config.cpu, "memory": self.config.memory, "pods": str(self.config.pods)}
        now = utc_now()
        return {"capacity": capacity, "allocatable": dict(capacity),
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "process node is posting ready status", "lastHeartbeatTime": now,
                                "lastTransitionTime": now}],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                              {"type": "Hostname", "address": self.config.node_name}],
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "process://1",
                             "kernelVersion": os.uname().release, "kubeProxyVersion": "",
                             "kubeletVersion": "v1.26.0-sluice-processnode", "machineID": "",
                             "operatingSystem": "linux", "osImage": "sluice process node", "systemUUID": ""},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}}

    def register(self):
        name = self.config.node_name
        for quantity_text in (self.config.cpu, self.config.memory):
            quantity.parse(quantity_text)
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": self.node_labels},
                "spec": {"taints": self.config.taints} if self.config.taints else {}}
        try:
            self.client.create("/api/v1/nodes", node)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.client.merge_patch("/api/v1/nodes/" + name, {"metadata": {"labels": self.node_labels},
                                                              "spec": {"taints": self.config.taints or None}})
        self.client.merge_patch("/api/v1/nodes/%s/status" % name, {"status": self._node_status()})

    def _heartbeat(self):
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        name = self.config.node_name
        while not self.stop_event.is_set():
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
                     "spec": {"holderIdentity": name, "leaseDurationSeconds": int(max(1, self.config.heartbeat * 4)),
                              "renewTime": utc_micro_now()}}
            try:
                try:
                    self.client.merge_patch(path + "/" + name, {"spec": lease["spec"]})
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    self.client.create(path, lease)
            except (ApiException, OSError, http.client.HTTPException) as exc:
                log("heartbeat failed: %s" % exc)
            self.stop_event.wait(self.config.heartbeat)

    # ------------------------------------------------------------------------------------------ pods

    def _sync_pods(self, pods):
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            self._pod_event("ADDED", pod)
        with self._mu:
            known = set(self.supervisors) | set(self._pods)
        for uid in known - seen:
            self._pod_gone(uid)

    def _pod_event(self, event_type, pod):
        uid = pod["metadata"]["uid"]
        if event_type == "DELETED":
            self._pod_gone(uid)
            return
        terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        with self._mu:
            if terminal or pod["metadata"].get("deletionTimestamp"):
                self.bound.pop(uid, None)
            else:
                self.bound[uid] = podspec.pod_requests(pod)
        if self.scheduler is not None:
            self.scheduler.wake()
        if self.config.simulated:
            with self._mu:
                self._pods[uid] = pod
                if uid in self._sim_pending:
                    return
                self._sim_pending.add(uid)
            self._sim_queue.put(uid)
            return
        with self._mu:
            sup = self.supervisors.get(uid)
            if sup is None and not self.stop_event.is_set():
                sup = PodSupervisor(self, pod)
                self.supervisors[uid] = sup
                sup.start()
                return
        if sup is not None:
            sup.update(pod)

    def _pod_gone(self, uid):
        with self._mu:
            self.bound.pop(uid, None)
            sup = self.supervisors.get(uid)
            pod = self._pods.pop(uid, None)
            self._sim_done.pop(uid, None)
        if sup is not None:
            sup.remove()
        if pod is not None:
            self.ips.release(uid)
        if self.scheduler is not None:
            self.scheduler.wake()

    def forget(self, uid):
        with self._mu:
            self.supervisors.pop(uid, None)
            self.ips.release(uid)

    def allocate_ip(self, uid):
        with self._mu:
            return self.ips.allocate(uid)

    # ------------------------------------------------------------------------------------------ simulated

    def _sim_worker(self):
        while not self.stop_event.is_set():
            try:
                uid = self._sim_queue.get(timeout=0.5)
            except queue.Empty:
                continue
            with self._mu:
                self._sim_pending.discard(uid)
                pod = self._pods.get(uid)
            if pod is None:
                continue
            try:
                self._sim_handle(uid, pod)
            except (ApiException, OSError, http.client.HTTPException) as exc:
                if not (isinstance(exc, ApiException) and exc.status in (404, 409)):
                    log("simulated pod %s: %s" % (pod["metadata"]["name"], exc))
                    with self._mu:
                        if uid in self._pods and uid not in self._sim_pending:
                            self._sim_pending.add(uid)
                            self._sim_queue.put(uid)

    def _sim_handle(self, uid, pod):
        path = self.pod_path(pod)
        if pod["metadata"].get("deletionTimestamp"):
            self.client.delete(path, {"gracePeriodSeconds": "0"},
                               {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                "preconditions": {"uid": uid}})
            return
        status = pod.get("status") or {}
        with self._mu:
            done = self._sim_done.get(uid)
        if done is not None and status.get("phase") == "Running" and status.get("podIP") == done:
            return
        ip = self.allocate_ip(uid)
        now = utc_now()
        containers = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
                       "started": True, "restartCount": 0, "containerID": "simulated://%s/%s" % (uid[:8], c["name"]),
                       "state": {"running": {"startedAt": now}}, "lastState": {}}
                      for c in (pod.get("spec") or {}).get("containers") or []]
        self.client.merge_patch(path + "/status", {"status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}], "startTime": status.get("startTime") or now,
            "conditions": conditions(True, now), "containerStatuses": containers}})
        with self._mu:
            self._sim_done[uid] = ip

    # ------------------------------------------------------------------------------------------ lookups

    def lookup_config(self, kind, ns, name):
        plural = "configmaps" if kind == "configMapRef" else "secrets"
        try:
            obj = self.client.get("/api/v1/namespaces/%s/%s/%s" % (ns, plural, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        data = dict(obj.get("data") or {})
        if plural == "secrets":
            data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}
        return data

    def lookup_endpoint(self, ns, name, port):
        """(pod IP, target port) backing service ns/name, preferring Ready pods; None if there is none."""
        try:
            svc = self.client.get("/api/v1/namespaces/%s/services/%s" % (ns, name))
        except ApiException:
            return None
        spec = svc.get("spec") or {}
        selector = spec.get("selector") or {}
        if not selector:
            return None
        pods = self.client.get("/api/v1/namespaces/%s/pods" % ns, {
            "labelSelector": ",".join("%s=%s" % kv for kv in sorted(selector.items()))}).get("items") or []
        ready = [p for p in pods if (p.get("status") or {}).get("podIP")
                 and not p["metadata"].get("deletionTimestamp") and is_ready(p)]
        candidates = ready or [p for p in pods if (p.get("status") or {}).get("podIP")
                               and not p["metadata"].get("deletionTimestamp")]
        if not candidates:
            return None
        target_pod = candidates[0]
        target = port
        for svc_port in spec.get("ports") or []:
            if port is None or svc_port.get("port") == port:
                target = svc_port.get("targetPort", svc_port.get("port"))
                if isinstance(target, str):
                    target = named_port(target_pod, target) or port
                break
        return target_pod["status"]["podIP"], target
