"""PodSupervisor: runs one pod's first container as a local process for as long as the pod is bound here.

One thread per pod: prepare the command line, environment and volumes, start the process, probe it, write
the pod status, restart it per restartPolicy, and on deletion stop it (SIGTERM, grace, SIGKILL) and confirm
with a gracePeriodSeconds=0 delete. Signals from the node (update/remove/shutdown) only set fields and wake
the thread; the thread alone makes API calls for its pod.
"""

import http.client
import os
import socket
import subprocess
import threading
import time

from ..client import ApiException
from . import podspec
from .runner import stop_process
from .util import conditions, log, named_port, utc_now



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
            started = utc_now()
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
            finished = utc_now()
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
                    port = named_port({"spec": {"containers": [container]}}, port)
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
                    port = named_port({"spec": {"containers": [container]}}, port)
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
        now = utc_now()
        pod_conditions = []
        for cond in conditions(ready, now):
            previous = self._conditions.get(cond["type"])
            if previous is None or previous[0] != cond["status"]:
                self._conditions[cond["type"]] = (cond["status"], now)
            cond["lastTransitionTime"] = self._conditions[cond["type"]][1]
            pod_conditions.append(cond)
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
        status = {"phase": phase, "conditions": pod_conditions, "containerStatuses": statuses,
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


