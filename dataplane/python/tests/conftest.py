"""Fixtures: the test-only fake data service (a C++ helper binary, path in $SLUICE_FAKE_DATASERVICE)."""

import json
import os
import subprocess
import time

import pytest


class FakeService:
    """A fake dispatcher + workers in a child process; talks over its stdin/stdout."""

    def __init__(self, *args):
        binary = os.environ.get("SLUICE_FAKE_DATASERVICE")
        if not binary or not os.path.exists(binary):
            pytest.fail("SLUICE_FAKE_DATASERVICE must name the sluice_fake_dataservice binary (run through ctest)")
        self.proc = subprocess.Popen(
            [binary, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            self.close()
            pytest.fail(f"fake service did not start: {line!r}")
        fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        self.address = fields["dispatcher"]
        self.workers = fields["workers"].split(",") if fields["workers"] else []

    def command(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def state(self):
        return self.command("state")

    def finish(self):
        return self.command("finish")

    def wait_for(self, predicate, timeout=10.0):
        """Polls the service state until predicate(state) holds or the deadline passes."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if predicate(state):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met before the deadline; last state: {state}")
            time.sleep(0.005)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except (BrokenPipeError, ValueError):
                pass


@pytest.fixture
def make_service():
    services = []

    def make(*args):
        svc = FakeService(*args)
        services.append(svc)
        return svc

    yield make
    for svc in services:
        svc.close()


@pytest.fixture
def service(make_service):
    return make_service("--workers", "2")


# Client settings that keep tests fast: frequent heartbeats.
FAST = dict(heartbeat_interval_s=0.01, create_timeout_s=10.0)
