"""Fixtures: a real data service (sluice-dispatcher + sluice-worker processes from $SLUICE_BIN_DIR)."""

import os
import signal
import subprocess
import threading
import time
import urllib.request

import pytest


class Process:
    """A child in its own process group with its output captured line by line."""

    def __init__(self, name, args, cwd=None):
        self.name = name
        self.lines = []
        self._cv = threading.Condition()
        self._ended = False
        self.proc = subprocess.Popen(
            args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._ended = True
            self._cv.notify_all()

    def wait_for_line(self, text, timeout=30.0):
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    raise AssertionError(f"{self.name} printed no line with {text!r}:\n" + "\n".join(self.lines))
                self._cv.wait(left)

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self._reader.join(timeout=10)
        self.proc.stdout.close()


def _field(line, key):
    for part in line.split():
        if part.startswith(key + "="):
            return part.split("=", 1)[1]
    raise AssertionError(f"no {key}= in {line!r}")


class DataService:
    """sluice-dispatcher and `workers` sluice-worker processes on 127.0.0.1 (ports picked by the kernel)."""

    def __init__(self, workers=2, worker_flags=(), dispatcher_flags=(), worker_dirs=None, dispatcher_dir=None):
        """worker_dirs: each worker's working directory (None: the test's); dispatcher_dir likewise."""
        bin_dir = os.environ.get("SLUICE_BIN_DIR")
        if not bin_dir or not os.path.exists(os.path.join(bin_dir, "sluice-dispatcher")):
            pytest.fail("SLUICE_BIN_DIR must name the build's bin/ directory (run through ctest)")
        bin_dir = os.path.abspath(bin_dir)  # the processes may run in other directories
        self.processes = []
        self.dispatcher = self._start(
            "dispatcher",
            [os.path.join(bin_dir, "sluice-dispatcher"), "--port=0", "--metrics_port=0", "--listen_host=127.0.0.1",
             "--heartbeat_interval_ms=100", "--worker_timeout_ms=10000", *dispatcher_flags],
            cwd=dispatcher_dir,
        )
        self.address = f"127.0.0.1:{self.dispatcher.port}"
        self.workers = [
            self._start(
                f"worker-{i}",
                [os.path.join(bin_dir, "sluice-worker"), "--port=0", "--metrics_port=0", "--listen_host=127.0.0.1",
                 f"--dispatcher_address={self.address}", "--heartbeat_interval_ms=100", *worker_flags],
                cwd=worker_dirs[i] if worker_dirs else None,
            )
            for i in range(workers)
        ]
        for w in self.workers:
            w.wait_for_line("registered with the dispatcher")

    def _start(self, name, args, cwd=None):
        p = Process(name, args, cwd=cwd)
        self.processes.append(p)
        line = p.wait_for_line("msg=listening")
        p.port = int(_field(line, "port"))
        p.metrics_port = int(_field(line, "metrics_port"))
        return p

    def metrics(self, process):
        """{(name, frozenset(labels)): value} from the process's /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            head, value = line.rsplit(" ", 1)
            name, _, labels = head.partition("{")
            pairs = frozenset(
                tuple(kv.split("=", 1)) for kv in labels.rstrip("}").replace('"', "").split(",") if kv
            )
            out[(name, pairs)] = float(value)
        return out

    def metric(self, process, name, **labels):
        want = {(k, v) for k, v in labels.items()}
        return sum(v for (n, ls), v in self.metrics(process).items() if n == name and want <= ls)

    def logs(self):
        return "\n".join(f"--- {p.name} ---\n" + "\n".join(p.lines) for p in self.processes)

    def close(self):
        for p in reversed(self.processes):
            p.kill()


@pytest.fixture
def dataservice():
    svc = DataService()
    yield svc
    svc.close()


def poll_until(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(0.02)


# Client settings for tests: frequent heartbeats.
FAST = dict(heartbeat_interval_s=0.1, create_timeout_s=30.0)


def self_signed_certificate(directory, name):
    """(cert, key) PEM paths of a self-signed certificate for localhost/127.0.0.1 that is its own CA
    (made with the openssl command line tool, installed by scripts/setup.sh)."""
    cert = os.path.join(directory, name + ".crt")
    key = os.path.join(directory, name + ".key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=" + name,
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,digitalSignature,keyCertSign"],
        check=True, capture_output=True)
    return cert, key
