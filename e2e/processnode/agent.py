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
import collections
import http.client
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import zlib
from urllib.parse import urlsplit

from .. import quantity
from ..client import ApiException
from . import podspec
from .runner import Launcher, ProcessTable, stop_process

_DEFAULT_PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH", "PYTHONPATH",
                     "PYTHONDONTWRITEBYTECODE")


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _micro_now():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def log(message):
    print("processnode: %s" % message, file=sys.stderr, flush=True)


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


class Informer(threading.Thread):
    """List+watch of one collection with relist on 410 and reconnects; calls back outside any lock."""

    def __init__(self, client, path, query, on_sync, on_event, stop, name, watch_timeout=300):
        super().__init__(name=name, daemon=True)
        self.client = client
        self.path = path
        self.query = dict(query)
        self.on_sync = on_sync
        self.on_event = on_event
        self.stop = stop
        self.watch_timeout = watch_timeout
        self.synced = threading.Event()
        self._conn = None

    def run(self):
        rv = None
        backoff = 0.1
        while not self.stop.is_set():
            try:
                if rv is None:
                    listing = self.client.get(self.path, self.query)
                    self.on_sync(listing.get("items") or [])
                    self.synced.set()
                    rv = listing["metadata"]["resourceVersion"]
                query = dict(self.query, watch="true", resourceVersion=rv, allowWatchBookmarks="true",
                             timeoutSeconds=str(self.watch_timeout))
                conn, resp = self.client.stream(self.path, query, timeout=self.watch_timeout + 30)
                self._conn = conn
                try:
                    if resp.status != 200:
                        raise ApiException(resp.status, resp.read().decode("utf-8", "replace"), "WATCH", self.path)
                    for line in resp:
                        if self.stop.is_set():
                            return
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                rv = None
                                break
                            raise ApiException(obj.get("code", 500), obj, "WATCH", self.path)
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if event.get("type") != "BOOKMARK":
                            self.on_event(event["type"], obj)
                    backoff = 0.1
                finally:
                    conn.close()
                    self._conn = None
            except (OSError, ApiException, ValueError, http.client.HTTPException) as exc:
                if self.stop.is_set():
                    return
                if isinstance(exc, ApiException) and exc.status == 410:
                    rv = None
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as exc:  # keep watching whatever goes wrong in a callback
                log("informer %s: %s: %s" % (self.name, type(exc).__name__, exc))
                self.stop.wait(1.0)

    def interrupt(self):
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


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
        now = _now()
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
                              "renewTime": _micro_now()}}
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
        now = _now()
        containers = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
                       "started": True, "restartCount": 0, "containerID": "simulated://%s/%s" % (uid[:8], c["name"]),
                       "state": {"running": {"startedAt": now}}, "lastState": {}}
                      for c in (pod.get("spec") or {}).get("containers") or []]
        self.client.merge_patch(path + "/status", {"status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}], "startTime": status.get("startTime") or now,
            "conditions": _conditions(True, now), "containerStatuses": containers}})
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
                 and not p["metadata"].get("deletionTimestamp") and _is_ready(p)]
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
                    target = _named_port(target_pod, target) or port
                break
        return target_pod["status"]["podIP"], target


def _is_ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _named_port(pod, name):
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == name:
                return port.get("containerPort")
    return None


def _conditions(ready, now):
    value = "True" if ready else "False"
    return [{"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": now}
            for ctype, status in (("Initialized", "True"), ("Ready", value), ("ContainersReady", value),
                                  ("PodScheduled", "True"))]


# ------------------------------------------------------------------------------------------ supervisor


class PodSupervisor(threading.Thread):
    """Runs one pod's first container as a process for as long as the pod is bound here."""

    def __init__(self, agent, pod):
        meta = pod["metadata"]
        super().__init__(name="pod-%s/%s" % (meta["namespace"], meta["name"]), daemon=True)
        self.agent = agent
        self.uid = meta["uid"]
        self._pod = pod
        self._wake = threading.Event()
        self._mu = threading.Lock()
        self._gone = False
        self._shutdown = False
        self._conditions = {}  # condition type -> (status, lastTransitionTime)
        self._liveness_failed = False
        self.ip = None
        self.proc = None

    # ----------------------------------------------------------------------------------- signals in

    def update(self, pod):
        with self._mu:
            self._pod = pod
        self._wake.set()

    def remove(self):
        self._gone = True
        self._wake.set()

    def shutdown(self):
        self._shutdown = True
        self._wake.set()

    @property
    def pod(self):
        with self._mu:
            return self._pod

    def _deleting(self):
        return bool(self.pod["metadata"].get("deletionTimestamp"))

    def _stopping(self):
        return self._gone or self._shutdown or self._deleting() or self.agent.stop_event.is_set()

    # ----------------------------------------------------------------------------------- main loop

    def run(self):
        try:
            self._run()
        except Exception as exc:  # a broken pod must not take the node down
            log("pod %s: %s: %s" % (self.name, type(exc).__name__, exc))
            if self.proc is not None and self.proc.poll() is None:
                stop_process(self.proc, 0)
        finally:
            if self.proc is not None and self.agent.processes is not None:
                self.agent.processes.forget(self.proc)
            self.agent.forget(self.uid)

    def _run(self):
        pod = self.pod
        spec = pod.get("spec") or {}
        container = (spec.get("containers") or [{}])[0]
        restart_policy = spec.get("restartPolicy", "Always")
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self._wait_for_deletion()
            return
        self.ip = self.agent.allocate_ip(self.uid)
        try:
            argv, env, cwd, log_path = self._prepare(pod, container)
        except podspec.PodSetupError as exc:
            self._write_status("Pending", False, {"waiting": {"reason": exc.reason, "message": exc.message}}, 0)
            self._wait_for_deletion()
            return
        restarts = 0
        backoff = 1.0
        last_state = {}
        while True:
            if self._stopping():
                break
            started = _now()
            try:
                self.proc = self.agent.processes.spawn(argv, env, cwd, log_path)
            except OSError as exc:
                self._write_status("Pending", False, {"waiting": {"reason": "RunContainerError",
                                                                  "message": str(exc)}}, restarts)
                self._wait_for_deletion()
                return
            waiter = threading.Thread(target=self._reap, args=(self.proc,), daemon=True)
            waiter.start()
            outcome = self._supervise(container, started, restarts, last_state)
            if outcome != "exited":
                break
            code = self.proc.returncode
            finished = _now()
            terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                          "startedAt": started, "finishedAt": finished}
            self.agent.processes.forget(self.proc)
            if restart_policy == "Always" or (restart_policy == "OnFailure" and code != 0) \
                    or self._liveness_failed:
                self._liveness_failed = False
                restarts += 1
                last_state = {"terminated": terminated}
                self._write_status("Running", False, {"waiting": {"reason": "CrashLoopBackOff",
                                                                  "message": "back-off restarting the process"}},
                                   restarts, last_state)
                if self._sleep(backoff):
                    break
                backoff = min(backoff * 2, 10.0)
                continue
            phase = "Succeeded" if code == 0 else "Failed"
            self._write_status(phase, False, {"terminated": terminated}, restarts, last_state)
            self._wait_for_deletion()
            return
        self._finish()

    def _finish(self):
        """Stops the process (grace period from the deletion) and confirms the deletion to the API."""
        pod = self.pod
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        if self._shutdown or self.agent.stop_event.is_set():
            grace = min(grace, self.agent.config.shutdown_grace)
        if self.proc is not None and self.proc.poll() is None:
            stop_process(self.proc, 0 if self._gone else grace)
        if self._deleting() and not self._gone and not self._shutdown:
            self._confirm_deletion()

    def _wait_for_deletion(self):
        while not (self._gone or self._shutdown or self.agent.stop_event.is_set()):
            if self._deleting():
                self._confirm_deletion()
                return
            self._wake.wait(1.0)
            self._wake.clear()

    def _confirm_deletion(self):
        try:
            self.agent.client.delete(self.agent.pod_path(self.pod), {"gracePeriodSeconds": "0"},
                                     {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                      "preconditions": {"uid": self.uid}})
        except ApiException as exc:
            if exc.status not in (404, 409):
                log("pod %s: confirming deletion failed: %s" % (self.name, exc))

    def _reap(self, proc):
        proc.wait()
        self._wake.set()

    def _sleep(self, seconds):
        """Waits, returning True early if the pod is being stopped."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._stopping():
                return True
            self._wake.wait(deadline - time.monotonic())
            self._wake.clear()
        return self._stopping()

    # ----------------------------------------------------------------------------------- preparation

    def _prepare(self, pod, container):
        agent = self.agent
        meta = pod["metadata"]
        ns = meta["namespace"]
        argv = podspec.command_line(container, agent.config.image_map)
        dirs = podspec.volume_dirs(pod, agent.config.work_dir)
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            path = dirs.get(volume.get("name"))
            if not path:
                continue
            os.makedirs(path, exist_ok=True)
            for kind in ("configMap", "secret"):
                if kind in volume:
                    ref_name = volume[kind].get("name") or volume[kind].get("secretName")
                    data = agent.lookup_config(kind + "Ref", ns, ref_name)
                    if data is None:
                        if volume[kind].get("optional"):
                            continue
                        raise podspec.PodSetupError("ContainerCreating", "%s %s not found" % (kind, ref_name))
                    for rel, content in podspec.config_volume_files(volume, data).items():
                        target = os.path.join(path, rel)
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                        with open(target, "w") as fh:
                            fh.write(content)
        mounts = podspec.mount_map(container, dirs)
        env = dict(agent.base_env)
        env["HOSTNAME"] = meta["name"]
        env = podspec.container_env(pod, container, env, self.ip, "127.0.0.1",
                                    lambda kind, name: agent.lookup_config(kind, ns, name))
        env = {k: podspec.rewrite_paths(v, mounts) for k, v in env.items()}
        argv = [podspec.expand(a, env) for a in argv]
        argv = [argv[0]] + [podspec.rewrite_paths(a, mounts) for a in argv[1:]]
        argv, env = self._resolve_services(argv, env)
        sandbox = os.path.join(agent.config.work_dir, "pods", "%s_%s_%s" % (ns, meta["name"], self.uid[:8]))
        os.makedirs(sandbox, exist_ok=True)
        cwd = sandbox
        working_dir = container.get("workingDir")
        if working_dir:
            rewritten = podspec.rewrite_paths(working_dir, mounts)
            if os.path.isdir(rewritten):
                cwd = rewritten
        log_path = os.path.join(agent.config.log_dir, "%s_%s_%s.log" % (ns, meta["name"], container.get("name")))
        return argv, env, cwd, log_path

    def _resolve_services(self, argv, env):
        """Rewrites service DNS names to pod IPs, waiting (bounded) for the services to get endpoints."""
        deadline = time.monotonic() + self.agent.config.service_wait
        ns = self.pod["metadata"]["namespace"]
        while True:
            unresolved = []
            new_argv = []
            for arg in argv:
                text, missing = podspec.service_targets(arg, self.agent.lookup_endpoint)
                new_argv.append(text)
                unresolved += missing
            new_env = {}
            for key, value in env.items():
                text, missing = podspec.service_targets(value, self.agent.lookup_endpoint)
                new_env[key] = text
                unresolved += missing
            if not unresolved or time.monotonic() >= deadline or self._stopping():
                if unresolved:
                    log("pod %s: no endpoints for %s; starting anyway" % (self.name, ", ".join(unresolved)))
                return new_argv, new_env
            self._write_status("Pending", False, {"waiting": {
                "reason": "ContainerCreating",
                "message": "waiting for endpoints of %s (in %s)" % (", ".join(sorted(set(unresolved))), ns)}}, 0)
            if self._sleep(0.5):
                return new_argv, new_env

    # ----------------------------------------------------------------------------------- supervision

    def _supervise(self, container, started, restarts, last_state):
        """Probes the running process; returns 'exited' when it ends or 'stop' when it must stop."""
        cap = self.agent.config.probe_period_cap
        readiness = container.get("readinessProbe")
        liveness = container.get("livenessProbe")
        ready = readiness is None
        self._write_status("Running", ready, {"running": {"startedAt": started}}, restarts, last_state, started)
        probes = []
        now = time.monotonic()
        for kind, probe in (("readiness", readiness), ("liveness", liveness)):
            if probe:
                period = float(probe.get("periodSeconds", 10))
                if cap is not None:
                    period = min(period, cap)
                delay = float(probe.get("initialDelaySeconds", 0))
                probes.append({"kind": kind, "probe": probe, "period": period, "next": now + delay,
                               "ok": 0, "bad": 0})
        while True:
            if self._stopping():
                return "stop"
            if self.proc.poll() is not None:
                return "exited"
            now = time.monotonic()
            for p in probes:
                if now < p["next"]:
                    continue
                p["next"] = now + p["period"]
                success = self._probe(p["probe"], container)
                if success:
                    p["ok"] += 1
                    p["bad"] = 0
                else:
                    p["bad"] += 1
                    p["ok"] = 0
                if p["kind"] == "readiness":
                    if not ready and p["ok"] >= int(p["probe"].get("successThreshold", 1)):
                        ready = True
                        self._write_status("Running", True, {"running": {"startedAt": started}}, restarts,
                                           last_state, started)
                    elif ready and p["bad"] >= int(p["probe"].get("failureThreshold", 3)):
                        ready = False
                        self._write_status("Running", False, {"running": {"startedAt": started}}, restarts,
                                           last_state, started)
                elif p["bad"] >= int(p["probe"].get("failureThreshold", 3)):
                    self._liveness_failed = True
                    stop_process(self.proc, float((self.pod.get("spec") or {}).get(
                        "terminationGracePeriodSeconds", 30)))
                    return "exited"
            wait = min([p["next"] for p in probes], default=now + 5.0) - time.monotonic()
            self._wake.wait(max(0.01, wait))
            self._wake.clear()

    def _probe(self, probe, container):
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            if "httpGet" in probe:
                get = probe["httpGet"]
                port = get.get("port")
                if isinstance(port, str) and not port.isdigit():
                    port = _named_port({"spec": {"containers": [container]}}, port)
                conn = http.client.HTTPConnection(get.get("host") or self.ip, int(port), timeout=timeout)
                try:
                    conn.request("GET", get.get("path", "/"),
                                 headers={h["name"]: h["value"] for h in get.get("httpHeaders") or []})
                    status = conn.getresponse().status
                finally:
                    conn.close()
                return 200 <= status < 400
            if "tcpSocket" in probe:
                port = probe["tcpSocket"].get("port")
                if isinstance(port, str) and not port.isdigit():
                    port = _named_port({"spec": {"containers": [container]}}, port)
                with socket.create_connection((probe["tcpSocket"].get("host") or self.ip, int(port)),
                                              timeout=timeout):
                    return True
            if "exec" in probe:
                result = subprocess.run(probe["exec"].get("command") or ["false"], timeout=timeout,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                return result.returncode == 0
        except (OSError, ValueError, TypeError, http.client.HTTPException, subprocess.TimeoutExpired):
            return False
        return False

    # ----------------------------------------------------------------------------------- status

    def _write_status(self, phase, ready, state, restarts, last_state=None, started=None):
        pod = self.pod
        spec = pod.get("spec") or {}
        now = _now()
        conditions = []
        for cond in _conditions(ready, now):
            previous = self._conditions.get(cond["type"])
            if previous is None or previous[0] != cond["status"]:
                self._conditions[cond["type"]] = (cond["status"], now)
            cond["lastTransitionTime"] = self._conditions[cond["type"]][1]
            conditions.append(cond)
        containers = spec.get("containers") or []
        statuses = []
        for i, container in enumerate(containers):
            if i == 0:
                statuses.append({"name": container.get("name"), "image": container.get("image", ""), "imageID": "",
                                 "containerID": "process://%s" % (self.proc.pid if self.proc else 0),
                                 "ready": bool(ready and "running" in state), "started": "running" in state,
                                 "restartCount": restarts, "state": state, "lastState": last_state or {}})
            else:
                # Only the first container runs; the others are reported as running (documented).
                statuses.append({"name": container.get("name"), "image": container.get("image", ""), "imageID": "",
                                 "containerID": "simulated://%s" % container.get("name"), "ready": True,
                                 "started": True, "restartCount": 0,
                                 "state": {"running": {"startedAt": started or now}}, "lastState": {}})
        status = {"phase": phase, "conditions": conditions, "containerStatuses": statuses,
                  "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}]}
        if self.ip:
            status["podIP"] = self.ip
            status["podIPs"] = [{"ip": self.ip}]
        if started:
            status["startTime"] = (pod.get("status") or {}).get("startTime") or started
        try:
            self.agent.client.merge_patch(self.agent.pod_path(pod) + "/status", {"status": status})
        except ApiException as exc:
            if exc.status != 404:
                log("pod %s: status update failed: %s" % (self.name, exc))
        except (OSError, http.client.HTTPException) as exc:
            log("pod %s: status update failed: %s" % (self.name, exc))


# ------------------------------------------------------------------------------------------ scheduler


class Scheduler:
    """Binds unscheduled pods that fit this node (nodeSelector, taints, CPU, memory, pod count).

    Several nodes may schedule at once. The scheduling nodes a pod could go to (Ready, selector and taints
    match) are ranked by a hash of pod and node (rendezvous hashing); the node ranked r tries the pod only
    after it has waited r * `patience` seconds. That spreads pods evenly, keeps nodes from racing for the same
    pod, and still places a pod whose first choice is full. A lost race is a harmless 409."""

    patience = 2.0
    SCHEDULER_LABEL = "sluice.dev/process-node-scheduler"

    def __init__(self, agent):
        self.agent = agent
        self._mu = threading.Lock()
        self._pending = collections.OrderedDict()  # uid -> (pod, first seen)
        self._nodes = {}  # name -> node
        self._wake = threading.Event()
        self.informer = Informer(agent.client, "/api/v1/pods", {"fieldSelector": "spec.nodeName="},
                                 self._sync, self._event, agent.stop_event, "unscheduled")
        self.node_informer = Informer(agent.client, "/api/v1/nodes", {}, self._sync_nodes, self._node_event,
                                      agent.stop_event, "nodes")
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self):
        self.node_informer.start()
        self.node_informer.synced.wait(30)
        self.informer.start()
        self._thread.start()

    def interrupt(self):
        self.informer.interrupt()
        self.node_informer.interrupt()

    def wake(self):
        self._wake.set()

    def _sync_nodes(self, nodes):
        with self._mu:
            self._nodes = {n["metadata"]["name"]: n for n in nodes}

    def _node_event(self, event_type, node):
        with self._mu:
            if event_type == "DELETED":
                self._nodes.pop(node["metadata"]["name"], None)
            else:
                self._nodes[node["metadata"]["name"]] = node
        self.wake()

    def _sync(self, pods):
        now = time.monotonic()
        with self._mu:
            previous = self._pending
            self._pending = collections.OrderedDict()
            for pod in pods:
                uid = pod["metadata"]["uid"]
                self._pending[uid] = (pod, previous[uid][1] if uid in previous else now)
        self.wake()

    def _event(self, event_type, pod):
        uid = pod["metadata"]["uid"]
        with self._mu:
            if event_type == "DELETED" or (pod.get("spec") or {}).get("nodeName") \
                    or pod["metadata"].get("deletionTimestamp"):
                self._pending.pop(uid, None)
            else:
                seen = self._pending.get(uid, (None, time.monotonic()))[1]
                self._pending[uid] = (pod, seen)
        self.wake()

    def _free(self):
        config = self.agent.config
        with self.agent._mu:
            used = list(self.agent.bound.values())
        cpu = quantity.cpu_millis(config.cpu) - sum(c for c, _ in used)
        memory = quantity.as_int(config.memory) - sum(m for _, m in used)
        return cpu, memory, config.pods - len(used)

    def _rank(self, pod, nodes, me):
        """This node's place among the scheduling nodes that could take the pod (0 = first choice)."""
        eligible = [me]
        for node in nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            taints = (node.get("spec") or {}).get("taints") or []
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (node.get("status") or {}).get("conditions") or [])
            name = node["metadata"]["name"]
            if name != me and ready and labels.get(self.SCHEDULER_LABEL) == "true" \
                    and podspec.fits(pod, labels, taints, 1 << 62, 1 << 62, 1):
                eligible.append(name)
        uid = pod["metadata"]["uid"]
        eligible.sort(key=lambda n: zlib.crc32((uid + n).encode()), reverse=True)
        return eligible.index(me)

    def _loop(self):
        agent = self.agent
        me = agent.config.node_name
        while not agent.stop_event.is_set():
            self._wake.wait(self.patience / 2)
            self._wake.clear()
            with self._mu:
                candidates = list(self._pending.values())
                nodes = list(self._nodes.values())
            now = time.monotonic()
            for pod, seen in candidates:
                if agent.stop_event.is_set():
                    return
                spec = pod.get("spec") or {}
                if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
                    continue
                if now - seen < self.patience * self._rank(pod, nodes, me):
                    continue
                cpu, memory, count = self._free()
                if not podspec.fits(pod, agent.node_labels, agent.config.taints, cpu, memory, count):
                    continue
                if self._bind(pod):
                    with self._mu:
                        self._pending.pop(pod["metadata"]["uid"], None)

    def _bind(self, pod):
        agent = self.agent
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod["metadata"]["name"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": agent.config.node_name}}
        try:
            agent.client.create(agent.pod_path(pod) + "/binding", binding)
            with agent._mu:
                agent.bound[pod["metadata"]["uid"]] = podspec.pod_requests(pod)
            return True
        except ApiException as exc:
            if exc.status in (404, 409):
                return True
            log("binding %s failed: %s" % (pod["metadata"]["name"], exc))
        except (OSError, http.client.HTTPException) as exc:
            log("binding %s failed: %s" % (pod["metadata"]["name"], exc))
        return False
