"""Test harness: a cluster for end-to-end tests, local or real.

    with harness.Cluster(workdir) as cluster:          # starts the test API server (or uses $KUBECONFIG)
        cluster.add_node("node-1", cpu="4", image_map={"sluice/worker:dev": "/path/to/sluice-worker"})
        cluster.apply(open("crds/dataservices.sluice.dev.yaml").read())
        cluster.wait_for_pods("default", "app=x", count=2)

Without KUBECONFIG the cluster is the test API server (a child process on a free port, with a bearer token and
a kubeconfig written for it) plus process nodes started by add_node(). With KUBECONFIG set the same calls talk
to that cluster: no server is started, add_node() starts nothing and returns None (real nodes run the pods).
teardown() (or leaving the `with`) stops every process the harness started, whatever state they are in.
A Cluster is meant for one test thread; its client may be shared with helper threads.
"""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import yaml

from .client import ApiException, KubeClient, KubeConfig, wait_until, write_kubeconfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADMIN_TOKEN = "e2e-admin-token"
_SLOT_DIR = os.path.join(tempfile.gettempdir(), "sluice-e2e-ip-slots")


class AddressSlot:
    """A machine-wide unique loopback range 127.<10+n>.0.0/16 for one cluster's pods.

    Pods of process nodes bind their pod IP, so two clusters running at once (ctest -j) must not hand out the
    same addresses. The slot is an flock on a file, released when the cluster stops (or its process dies)."""

    def __init__(self):
        self.fd = None
        os.makedirs(_SLOT_DIR, exist_ok=True)
        for n in range(240):
            fd = os.open(os.path.join(_SLOT_DIR, "slot-%d" % n), os.O_CREAT | os.O_RDWR, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd = fd
            self.octet = 10 + n
            return
        raise RuntimeError("all 240 e2e address slots are in use (%s)" % _SLOT_DIR)

    def node_base(self, index, simulated):
        """First pod address of the index-th node: 254 per real node, about 5000 per simulated node."""
        third = 100 + 20 * (index % 7) if simulated else index % 100
        return "127.%d.%d.2" % (self.octet, third)

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class ManagedProcess:
    """A child process in its own process group, with its output in a log file."""

    def __init__(self, argv, log_path, cwd=REPO, env=None):
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def stop(self, grace=10.0):
        """SIGTERM, then SIGKILL for the whole group after `grace` seconds. Returns the exit code."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        code = self.proc.wait()
        self._log.close()
        return code

    def log_tail(self, lines=40):
        try:
            with open(self.log_path, "rb") as fh:
                return b"".join(fh.readlines()[-lines:]).decode("utf-8", "replace")
        except OSError:
            return ""


class ProcessNode:
    def __init__(self, name, process, log_dir, work_dir, ip_base):
        self.name = name
        self.process = process
        self.log_dir = log_dir
        self.work_dir = work_dir
        self.ip_base = ip_base

    def pod_log(self, namespace, pod, container):
        path = os.path.join(self.log_dir, "%s_%s_%s.log" % (namespace, pod, container))
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")

    def stop(self, grace=15.0):
        return self.process.stop(grace)


class Cluster:
    def __init__(self, workdir=None, kubeconfig=None, apiserver_args=(), python=sys.executable, users=None,
                 tls=False):
        self.kubeconfig = kubeconfig if kubeconfig is not None else os.environ.get("KUBECONFIG")
        self.real = bool(self.kubeconfig)
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="sluice-e2e-")
        os.makedirs(self.workdir, exist_ok=True)
        self.apiserver_args = list(apiserver_args)
        self.python = python
        self.server = None
        self.url = None
        self.client = None
        self.nodes = []
        self.processes = []
        self.namespaces = []  # made by create_namespace(); deleted at teardown on a real cluster
        # Extra test-server users: {name: [groups]}; each gets a token "<name>-token" (see kubeconfig_for).
        self.users = dict(users or {})
        self._node_index = 0
        self._slot = None
        # Serve HTTPS with a self-signed certificate for 127.0.0.1 (kubectl sends no bearer token over plain HTTP).
        self.tls = tls
        self.ca_file = None

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self, timeout=30.0):
        if self.real:
            self.client = KubeClient.from_kubeconfig(self.kubeconfig, user_agent="sluice-e2e/1.0")
            self.url = self.client.config.server
            return self
        tokens = os.path.join(self.workdir, "tokens.csv")
        with open(tokens, "w") as fh:
            fh.write('%s,e2e-admin,1,"system:masters"\n' % ADMIN_TOKEN)
            for i, (user, groups) in enumerate(sorted(self.users.items())):
                fh.write('%s,%s,%d,"%s"\n' % (self._token_of(user), user, 100 + i, ",".join(groups)))
        port_file = os.path.join(self.workdir, "apiserver.port")
        if os.path.exists(port_file):
            os.unlink(port_file)  # a reused workdir: wait for this server's port, not the last one's
        argv = [self.python, "-m", "e2e.apiserver", "--port", "0", "--port-file", port_file,
                "--token-file", tokens] + self.apiserver_args
        if self.tls:
            self.ca_file = os.path.join(self.workdir, "apiserver.crt")
            key = os.path.join(self.workdir, "apiserver.key")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                            "-subj", "/CN=sluice-e2e-apiserver", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", key, "-out", self.ca_file], check=True, capture_output=True)
            argv += ["--tls-cert", self.ca_file, "--tls-key", key]
        self.server = ManagedProcess(argv, os.path.join(self.workdir, "apiserver.log"))
        try:
            wait_until(lambda: os.path.exists(port_file) or not self.server.alive(), timeout,
                       message="the test API server to listen")
        except TimeoutError:
            self.teardown()
            raise
        if not self.server.alive():
            tail = self.server.log_tail()
            self.teardown()
            raise RuntimeError("the test API server exited:\n" + tail)
        with open(port_file) as fh:
            port = int(fh.read())
        self.url = "%s://127.0.0.1:%d" % ("https" if self.tls else "http", port)
        self.kubeconfig = write_kubeconfig(os.path.join(self.workdir, "kubeconfig"), self.url, ADMIN_TOKEN,
                                           ca_file=self.ca_file)
        self.client = KubeClient(KubeConfig(self.url, token=ADMIN_TOKEN, ca_file=self.ca_file),
                                 user_agent="sluice-e2e/1.0")
        return self

    def teardown(self):
        """Stops processes started with start_process(), process nodes (their pods' processes with them) and the
        API server."""
        errors = []
        if self.real and self.client is not None and self.namespaces:
            # A real cluster outlives the test: remove the namespaces it made, while the processes the test
            # started (an operator releasing finalizers) still run.
            for ns in self.namespaces:
                try:
                    self.client.delete("/api/v1/namespaces/" + ns)
                except ApiException as exc:
                    if exc.status != 404:
                        errors.append(exc)

            def gone():
                for ns in self.namespaces:
                    try:
                        self.client.get("/api/v1/namespaces/" + ns)
                        return False
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
                return True
            try:
                wait_until(gone, 120, message="the test namespaces to be deleted")
            except TimeoutError as exc:
                errors.append(exc)
        self.namespaces = []
        for process in reversed(self.processes):
            try:
                process.stop(10)
            except OSError as exc:
                errors.append(exc)
        self.processes = []
        for node in reversed(self.nodes):
            try:
                node.stop()
            except OSError as exc:
                errors.append(exc)
        self.nodes = []
        if self.client is not None:
            self.client.close()
        if self.server is not None:
            self.server.stop(5)
            self.server = None
        if self._slot is not None:
            self._slot.release()
            self._slot = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if errors:
            raise errors[0]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.teardown()
        return False

    # ------------------------------------------------------------------------------------------ processes

    def start_process(self, name, argv, env=None):
        """Starts a child process (own process group, output in <workdir>/<name>.log) that teardown() stops."""
        process = ManagedProcess(argv, os.path.join(self.workdir, name + ".log"), env=env)
        self.processes.append(process)
        return process

    # ------------------------------------------------------------------------------------------ users

    @staticmethod
    def _token_of(user):
        return "%s-token" % user.replace(":", "-")

    def kubeconfig_for(self, user):
        """A kubeconfig for one of the `users` given to the constructor (test server only)."""
        if self.real:
            raise RuntimeError("kubeconfig_for() needs the test API server; a real cluster has its own users")
        if user not in self.users:
            raise KeyError("user %r was not given to Cluster(users=...)" % user)
        path = os.path.join(self.workdir, "kubeconfig-" + self._token_of(user))
        return write_kubeconfig(path, self.url, self._token_of(user), ca_file=self.ca_file)

    # ------------------------------------------------------------------------------------------ test server admin

    def admin(self, method, path, body=None):
        """Calls the test server's admin API (/_admin/...): faults, stats, watches, RBAC policy."""
        if self.real:
            raise RuntimeError("the admin API %s exists only on the test API server" % path)
        return self.client.call(method, "/_admin/" + path.lstrip("/"), body)

    # ------------------------------------------------------------------------------------------ nodes

    def add_node(self, name, cpu="8", memory="16Gi", pods=110, labels=None, taints=(), image_map=None,
                 simulated=False, schedule=False, ip_base=None, probe_period_cap=0.2, extra_args=(),
                 timeout=30.0):
        """Starts a process node and waits until its Node is Ready; None on a real cluster."""
        if self.real:
            return None
        self._node_index += 1
        if self._slot is None:
            self._slot = AddressSlot()
        ip_base = ip_base or self._slot.node_base(self._node_index, simulated)
        node_dir = os.path.join(self.workdir, "nodes", name)
        os.makedirs(node_dir, exist_ok=True)
        argv = [self.python, "-m", "e2e.processnode", "--kubeconfig", self.kubeconfig, "--node-name", name,
                "--cpu", str(cpu), "--memory", str(memory), "--pods", str(pods),
                "--log-dir", os.path.join(node_dir, "logs"), "--work-dir", os.path.join(node_dir, "work"),
                "--ip-base", ip_base]
        for key, value in (labels or {}).items():
            argv += ["--label", "%s=%s" % (key, value)]
        for taint in taints:
            argv += ["--taint", taint]
        if image_map is not None:
            if isinstance(image_map, dict):
                path = os.path.join(node_dir, "image-map.json")
                with open(path, "w") as fh:
                    json.dump(image_map, fh)
                image_map = path
            argv += ["--image-map", image_map]
        if simulated:
            argv.append("--simulated")
        if schedule:
            argv.append("--schedule")
        if probe_period_cap:
            argv += ["--probe-period-cap", str(probe_period_cap)]
        argv += list(extra_args)
        process = ManagedProcess(argv, os.path.join(node_dir, "processnode.log"))
        node = ProcessNode(name, process, os.path.join(node_dir, "logs"), os.path.join(node_dir, "work"), ip_base)
        self.nodes.append(node)

        def ready():
            if not process.alive():
                raise RuntimeError("process node %s exited:\n%s" % (name, process.log_tail()))
            try:
                obj = self.client.get("/api/v1/nodes/" + name)
            except ApiException:
                return False
            return any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (obj.get("status") or {}).get("conditions") or [])

        self.wait_for(ready, timeout, "node %s to be Ready" % name)
        return node

    # ------------------------------------------------------------------------------------------ objects

    def path_for(self, obj, namespace=None):
        return self.client.path_for(obj, namespace)

    def apply(self, docs, namespace=None, manager="sluice-e2e", force=True):
        """Server-side applies YAML text, a YAML file path, a dict or a list of dicts; returns the results."""
        if isinstance(docs, str):
            text = docs
            if "\n" not in docs and os.path.exists(docs):
                with open(docs) as fh:
                    text = fh.read()
            docs = [d for d in yaml.safe_load_all(text) if d]
        elif isinstance(docs, dict):
            docs = [docs]
        out = []
        for doc in docs:
            doc = json.loads(json.dumps(doc))
            if namespace and self.client.discover(doc["apiVersion"], doc["kind"])[1]:
                doc.setdefault("metadata", {}).setdefault("namespace", namespace)
            out.append(self.client.apply(self.path_for(doc, namespace), doc, manager, force=force))
            if doc.get("kind") == "CustomResourceDefinition":
                self.wait_for_condition(doc["apiVersion"], "CustomResourceDefinition", doc["metadata"]["name"],
                                        None, "Established")
        return out

    def create_namespace(self, name):
        try:
            created = self.client.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                "metadata": {"name": name}})
            self.namespaces.append(name)
            return created
        except ApiException as exc:
            if exc.status != 409:
                raise
            return self.client.get("/api/v1/namespaces/" + name)

    def get(self, api_version, kind, name, namespace=None):
        return self.client.get(self.path_for({"apiVersion": api_version, "kind": kind,
                                              "metadata": {"name": name, "namespace": namespace}}))

    def delete(self, api_version, kind, name, namespace=None, **query):
        path = self.path_for({"apiVersion": api_version, "kind": kind,
                              "metadata": {"name": name, "namespace": namespace}})
        try:
            return self.client.delete(path, {k: str(v) for k, v in query.items()} or None)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None

    # ------------------------------------------------------------------------------------------ waiting

    @staticmethod
    def wait_for(predicate, timeout=30.0, message="condition"):
        """Waits until predicate() is truthy (returned) or raises TimeoutError after `timeout` seconds."""
        return wait_until(predicate, timeout, message=message)

    def wait_for_condition(self, api_version, kind, name, namespace, condition, status="True", timeout=30.0):
        def check():
            obj = self.get(api_version, kind, name, namespace)
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if cond.get("type") == condition and cond.get("status") == status:
                    return obj
            return None

        return self.wait_for(check, timeout, "%s %s condition %s=%s" % (kind, name, condition, status))

    def wait_for_pods(self, namespace, label_selector, count, phase="Running", ready=True, timeout=30.0):
        """Waits for exactly `count` non-terminating pods matching the selector in `phase` (and Ready)."""
        def check():
            pods = self.client.get("/api/v1/namespaces/%s/pods" % namespace,
                                   {"labelSelector": label_selector})["items"]
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            good = [p for p in live if (p.get("status") or {}).get("phase") == phase
                    and (not ready or any(c.get("type") == "Ready" and c.get("status") == "True"
                                          for c in p["status"].get("conditions") or []))]
            return good if len(good) == count and len(live) == count else None

        return self.wait_for(check, timeout, "%d %s pods matching %r in %s" % (count, phase, label_selector,
                                                                             namespace))

    def wait_for_deletion(self, api_version, kind, name, namespace=None, timeout=30.0):
        def gone():
            try:
                self.get(api_version, kind, name, namespace)
                return False
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise

        return self.wait_for(gone, timeout, "%s %s to be deleted" % (kind, name))

