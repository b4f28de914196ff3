"""Starting and stopping pod processes so that none outlive the process node.

Every pod process runs in its own session (process group), so signals reach its children too. Processes are
started from one long-lived launcher thread through `setpriv --pdeathsig KILL`, so the kernel kills them if the
node dies without cleaning up (the parent-death signal fires when the *thread* that forked exits, hence the
dedicated thread). `ProcessTable` remembers every live group for the shutdown sweep. All classes are
thread-safe.
"""

import os
import queue
import shutil
import signal
import subprocess
import threading
import time

_SETPRIV = shutil.which("setpriv")


class Launcher:
    """Runs Popen on a single thread that lives as long as the node."""

    def __init__(self):
        self._requests = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="launcher", daemon=True)
        self._thread.start()

    def _loop(self):
        while True:
            item = self._requests.get()
            if item is None:
                return
            func, result = item
            try:
                result.put((func(), None))
            except Exception as exc:  # handed back to the caller, who reports it on the pod
                result.put((None, exc))

    def call(self, func):
        result = queue.SimpleQueue()
        self._requests.put((func, result))
        value, error = result.get()
        if error is not None:
            raise error
        return value

    def stop(self):
        self._requests.put(None)


class ProcessTable:
    def __init__(self, launcher):
        self.launcher = launcher
        self._mu = threading.Lock()
        self._procs = {}

    def spawn(self, argv, env, cwd, log_path):
        """Starts argv in a new session with stdout+stderr appended to log_path; returns the Popen."""
        prefix = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []

        def start():
            with open(log_path, "ab") as log:
                log.write(("--- start %s: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                                   " ".join(argv))).encode())
                log.flush()
                return subprocess.Popen(prefix + list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        close_fds=True)

        proc = self.launcher.call(start)
        with self._mu:
            self._procs[proc.pid] = proc
        return proc

    def forget(self, proc):
        with self._mu:
            self._procs.pop(proc.pid, None)

    def live(self):
        with self._mu:
            return [p for p in self._procs.values() if p.poll() is None]

    def kill_all(self, grace):
        """SIGTERM every group, SIGKILL what is left after `grace` seconds, reap everything."""
        procs = self.live()
        for proc in procs:
            signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in procs:
            signal_group(proc, signal.SIGKILL)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            self.forget(proc)


def signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_process(proc, grace, interrupted=None):
    """SIGTERM the process group, wait up to `grace` seconds, then SIGKILL; returns the exit code."""
    signal_group(proc, signal.SIGTERM)
    try:
        return proc.wait(max(0.0, grace))
    except subprocess.TimeoutExpired:
        signal_group(proc, signal.SIGKILL)
        return proc.wait()
    finally:
        # Whatever the main process left behind in its group goes too.
        signal_group(proc, signal.SIGKILL)
