"""The image scripts/images.sh built (named in build/images/image.env), run for real under podman with
worker-image/containers.conf: every program answers --help; the image is minimal, non-root and labelled; a
dispatcher and two workers in containers (host network, loopback, kernel-picked ports) serve a Python client
on the host the same elements as the same programs run as host processes; images.sh names what is missing.

Run through ctest (image_build builds the image first, as a fixture); needs root, podman and runc."""

import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import time

import pytest

SOURCE = os.environ.get("SLUICE_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SLUICE_BINARY_DIR") or os.path.join(SOURCE, "build")
CONTAINERS_CONF = os.path.join(SOURCE, "worker-image", "containers.conf")
ENV = dict(os.environ, CONTAINERS_CONF=CONTAINERS_CONF)
DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist (scripts/setup.sh)
PIPELINE = """
name: image-test
source:
  idx:
    images: %s/t10k-images-idx3-ubyte.gz
    labels: %s/t10k-labels-idx1-ubyte.gz
    split_size: 500
steps:
  - map:
      ops:
        - cast: {field: image, dtype: float32, scale: 0.00392156862745098}
""" % (DATA_DIR, DATA_DIR)
ELEMENTS = 10000  # the t10k set
DEADLINE_S = 120  # generous: the machine is shared and slow, a hang is what this looks for


def image_env():
    path = os.path.join(BUILD, "images", "image.env")
    if not os.path.exists(path):
        pytest.fail("%s is missing: scripts/images.sh builds the image (ctest's image_build does)" % path)
    out = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            out[key] = value.strip('"')
    return out


def podman(*args, check=True, timeout=DEADLINE_S):
    r = subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("podman %s failed (%d):\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


@pytest.fixture(scope="module")
def image():
    return image_env()


def test_every_program_answers_help(image):
    programs = image["SLUICE_IMAGE_PROGRAMS"].split()
    assert {"sluice", "sluice-dispatcher", "sluice-worker", "sluice-operator"} <= set(programs)
    if os.path.exists(os.path.join(BUILD, "bin", "sluice-autoscaler")):
        assert "sluice-autoscaler" in programs, "the build has sluice-autoscaler: the image must hold it"
    for program in programs:
        r = podman("run", "--rm", "--network", "none", image["SLUICE_IMAGE"], program, "--help")
        assert "Usage:" in r.stdout and program in r.stdout, (program, r.stdout, r.stderr)


def test_image_is_minimal_non_root_and_labelled(image, tmp_path):
    inspect = json.loads(podman("image", "inspect", image["SLUICE_IMAGE"]).stdout)[0]
    config = inspect["Config"]
    assert config["User"] == "65532:65532"
    labels = config["Labels"]
    version = re.search(r"project\(sluice VERSION (\S+)", open(os.path.join(SOURCE, "CMakeLists.txt")).read())[1]
    assert labels["org.opencontainers.image.version"] == version
    head = subprocess.run(["git", "-C", SOURCE, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if head:
        assert labels["org.opencontainers.image.revision"] in (head, head + "-dirty")
    assert labels["org.opencontainers.image.base.name"] == image["SLUICE_IMAGE_BASE"]

    # The file system: the programs in /usr/local/bin, and no shell, coreutils or package manager.
    name = "sluice-image-test-%d" % os.getpid()
    podman("create", "--name", name, image["SLUICE_IMAGE"])
    try:
        # worker-image/containers.conf is in force: runc and the explicit ulimits.
        container = json.loads(podman("container", "inspect", name).stdout)[0]
        assert container["OCIRuntime"] == "runc"
        limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in container["HostConfig"]["Ulimits"]}
        assert limits["RLIMIT_NOFILE"] == (20000, 20000) and limits["RLIMIT_NPROC"] == (32768, 32768), limits
        export = tmp_path / "fs.tar"
        podman("export", "-o", str(export), name)
    finally:
        podman("rm", "-f", name, check=False)
    with tarfile.open(export) as tar:
        names = {m.name.lstrip("./").rstrip("/") for m in tar.getmembers()}
        passwd = tar.extractfile("etc/passwd").read().decode()
    local_bin = sorted(n.split("/")[-1] for n in names if n.startswith("usr/local/bin/"))
    assert local_bin == sorted(image["SLUICE_IMAGE_PROGRAMS"].split())
    for tool in ["usr/bin/sh", "usr/bin/bash", "usr/bin/dash", "usr/bin/ls", "usr/bin/cat", "usr/bin/dpkg",
                 "usr/bin/perl", "usr/bin/apt", "usr/bin/awk", "usr/bin/openssl", "usr/sbin/ldconfig"]:
        assert tool not in names, tool + " is in the image"
    assert "sluice:x:65532:65532:" in passwd
    assert "etc/ssl/certs/ca-certificates.crt" in names
    r = podman("run", "--rm", "--network", "none", image["SLUICE_IMAGE"], "sh", "-c", "true", check=False)
    assert r.returncode != 0 and "not found" in r.stderr, r.stderr


def test_oci_archive(image):
    archive = image["SLUICE_IMAGE_ARCHIVE"]
    assert archive.startswith(os.path.join(BUILD, "images")) or os.path.realpath(archive).startswith(
        os.path.realpath(os.path.join(BUILD, "images"))), archive
    with tarfile.open(archive) as tar:
        layout = json.load(tar.extractfile("oci-layout"))
        index = json.load(tar.extractfile("index.json"))
    assert layout["imageLayoutVersion"] == "1.0.0"
    refs = [m.get("annotations", {}).get("org.opencontainers.image.ref.name") for m in index["manifests"]]
    assert any(ref and image["SLUICE_IMAGE"].endswith(ref) for ref in refs), refs


class Daemon:
    """One program, either a host process or `podman run` of a container (host network), output read line by
    line; the port it logs in msg=listening."""

    def __init__(self, name, argv, container=None):
        self.name, self.container = name, container
        self.lines, self.cv, self.ended = [], threading.Condition(), False
        self.proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.ended = True
            self.cv.notify_all()

    def wait_for(self, text):
        deadline = time.monotonic() + DEADLINE_S
        with self.cv:
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                left = deadline - time.monotonic()
                if self.ended or left <= 0:
                    raise AssertionError("%s printed no line with %r:\n%s" % (self.name, text, "\n".join(self.lines)))
                self.cv.wait(left)

    def port(self):
        return int(re.search(r"\bport=(\d+)", self.wait_for("msg=listening"))[1])

    def stop(self):
        if self.container:
            podman("rm", "--force", "--time", "0", self.container, check=False)
        elif self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_service(tmp_path, program):
    """A dispatcher and two workers on loopback; program(name, args) -> argv. Returns (address, daemons)."""
    daemons = []
    common = ["--port=0", "--metrics_port=0", "--listen_host=127.0.0.1", "--heartbeat_interval_ms=100"]
    try:
        dispatcher = Daemon("dispatcher", *program("dispatcher", ["sluice-dispatcher", *common]))
        daemons.append(dispatcher)
        address = "127.0.0.1:%d" % dispatcher.port()
        for i in range(2):
            w = Daemon("worker-%d" % i, *program("worker-%d" % i, ["sluice-worker", *common,
                                                                   "--dispatcher_address=" + address]))
            daemons.append(w)
        for w in daemons[1:]:
            w.wait_for("registered with the dispatcher")
        return address, daemons
    except BaseException:
        for d in reversed(daemons):
            d.stop()
        raise


CONSUMER = """
import hashlib, json, sys
import sluice
ds = sluice.Dataset(sys.argv[1], pipeline=sys.argv[2], processing_mode="distributed_epoch",
                    job_name="image-test", heartbeat_interval_s=0.1, create_timeout_s=60.0)
digests = []
for e in ds:
    h = hashlib.sha256()
    for key in sorted(e):
        h.update(key.encode()); h.update(str(e[key].dtype).encode()); h.update(repr(e[key].shape).encode())
        h.update(e[key].tobytes())
    digests.append(h.hexdigest())
ds.close()
print(json.dumps(sorted(digests)))
"""


def read_all(address, daemons):
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    try:
        r = subprocess.run(["/usr/bin/python3", "-c", CONSUMER, address, PIPELINE], env=env, capture_output=True,
                           text=True, timeout=DEADLINE_S)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("the consumer did not finish within %d s\n%s" % (DEADLINE_S, logs(daemons))) from e
    assert r.returncode == 0, "consumer failed:\n%s\n%s" % (r.stderr, logs(daemons))
    return json.loads(r.stdout.strip().splitlines()[-1])


def logs(daemons):
    return "\n".join("--- %s ---\n%s" % (d.name, "\n".join(d.lines)) for d in daemons)


def test_containers_serve_the_same_elements_as_the_binaries(image, tmp_path):
    bin_dir = os.path.join(BUILD, "bin")
    prefix = "sluice-image-test-%d-" % os.getpid()

    def host(name, argv):
        return [os.path.join(bin_dir, argv[0])] + argv[1:], None

    def container(name, argv):
        # Hardened as a platform would run them: read-only root, no capabilities, no new privileges.
        return (["podman", "run", "--rm", "--name", prefix + name, "--network", "host", "--read-only",
                 "--cap-drop=ALL", "--security-opt=no-new-privileges",
                 "--volume", "%s:%s:ro" % (DATA_DIR, DATA_DIR), image["SLUICE_IMAGE"]] + argv, prefix + name)

    results = {}
    for label, program in (("binaries", host), ("containers", container)):
        address, daemons = start_service(tmp_path, program)
        try:
            results[label] = read_all(address, daemons)
            # Both workers took part (dynamic sharding hands splits to whoever asks).
            for w in daemons[1:]:
                w.wait_for('msg="task started"')
        finally:
            for d in reversed(daemons):
                d.stop()
    assert len(results["binaries"]) == ELEMENTS
    assert len(set(results["binaries"])) > ELEMENTS * 0.9  # distinct images, not one element repeated
    assert results["containers"] == results["binaries"]


def run_images_sh(env_overrides):
    env = dict(os.environ, **env_overrides)
    return subprocess.run([os.path.join(SOURCE, "scripts", "images.sh")], env=env, capture_output=True, text=True,
                          timeout=DEADLINE_S)


def test_images_sh_names_a_missing_program(tmp_path):
    (tmp_path / "bin").mkdir()
    r = run_images_sh({"SLUICE_BUILD_DIR": str(tmp_path)})
    assert r.returncode != 0
    assert "bin/sluice is missing: build it first" in r.stderr, r.stderr


def test_images_sh_names_a_runtime_package_missing_from_the_list(tmp_path):
    listed = open(os.path.join(SOURCE, "worker-image", "runtime-packages.txt")).read()
    short = tmp_path / "runtime-packages.txt"
    short.write_text("\n".join(l for l in listed.splitlines() if l.strip() != "libyaml-cpp0.7") + "\n")
    r = run_images_sh({"SLUICE_RUNTIME_PACKAGES": str(short)})
    assert r.returncode != 0
    assert "add to worker-image/runtime-packages.txt: libyaml-cpp0.7 (" in r.stderr, r.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
