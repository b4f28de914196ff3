"""minimize_rootfs.py on small synthetic Debian roots (a dpkg status file, .list files, merged-usr links):
what it keeps, what it deletes, the rewritten status, dangling links, the user, and its errors."""

import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "minimize_rootfs.py")

PACKAGES = {
    # name: (status fields, files)
    "base-files": ("Pre-Depends: awk\n", ["/etc/os-release", "/usr/lib/os-release", "/tmp"]),
    "mawk": ("Provides: awk\n", ["/usr/bin/mawk"]),
    "libc6": ("Depends: libgcc-s1\n", ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu"]),
    "libgcc-s1": ("Depends: libc6 (>= 2.35)\n", ["/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"]),
    "libgrpc": ("Depends: libc6 (>= 2.34), libssl3 | libssl-alt, libresolver\n",
                ["/usr/lib/x86_64-linux-gnu/libgrpc.so.29", "/usr/share/grpc/roots.pem"]),
    "libssl3": ("", ["/usr/lib/x86_64-linux-gnu/libssl.so.3"]),
    "c-ares": ("Provides: libresolver\n", ["/usr/lib/x86_64-linux-gnu/libcares.so.2"]),
    "bash": ("Depends: libc6\n", ["/bin/bash", "/etc/bash.bashrc", "/usr/share/bash"]),
    "coreutils": ("Depends: libc6\n", ["/bin/cat", "/usr/bin/ls", "/usr/share/coreutils", "/usr/share/coreutils/x"]),
}


DIRECTORIES = {"/tmp", "/usr/lib/x86_64-linux-gnu", "/usr/share/bash", "/usr/share/coreutils"}


def make_root(tmp_path, packages=PACKAGES, links=()):
    """links: (path, target) symlinks made before the packages' files (whose paths then go through them are
    listed but not created)."""
    root = tmp_path / "root"
    for d in ["usr/bin", "usr/lib/x86_64-linux-gnu", "usr/lib64", "etc/alternatives", "var/lib/dpkg/info",
              "var/log", "var/cache/debconf"]:
        (root / d).mkdir(parents=True, exist_ok=True)
    for link, target in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")]:
        os.symlink(target, root / link)
    for link, target in links:
        os.symlink(target, root / link)
    status = []
    for name, (fields, files) in packages.items():
        status.append("Package: %s\nStatus: install ok installed\nArchitecture: amd64\n%sDescription: %s\n multi\n line"
                      % (name, fields, name))
        with open(root / "var/lib/dpkg/info" / ("%s.list" % name), "w") as f:
            f.write("/.\n")
            for path in files:
                f.write(path + "\n")
                host = root / path.lstrip("/")
                if any(path.startswith("/" + link + "/") for link, _ in links):
                    continue
                if path in DIRECTORIES:
                    host.mkdir(parents=True, exist_ok=True)
                else:
                    host.parent.mkdir(parents=True, exist_ok=True)
                    host.write_text(name)
        (root / "var/lib/dpkg/info" / ("%s.postinst" % name)).write_text("#!/bin/sh\n")
    (root / "var/lib/dpkg/status").write_text("\n\n".join(status) + "\n")
    (root / "var/lib/dpkg/status-old").write_text("old")
    (root / "var/log/dpkg.log").write_text("log")
    # Generated (no package owns them): kept.
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (root / "etc/group").write_text("root:x:0:\n")
    # Alternatives: awk -> /etc/alternatives/awk -> /usr/bin/mawk (absolute, inside the root).
    os.symlink("/usr/bin/mawk", root / "etc/alternatives/awk")
    os.symlink("/etc/alternatives/awk", root / "usr/bin/awk")
    os.symlink("libssl.so.3", root / "usr/lib/x86_64-linux-gnu/libssl.so")  # relative, to a kept file
    return root


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=60)


def status_packages(root):
    return [l.split(": ")[1] for l in (root / "var/lib/dpkg/status").read_text().splitlines()
            if l.startswith("Package: ")]


def test_keeps_the_closure_and_deletes_the_rest(tmp_path):
    root = make_root(tmp_path)
    r = run(root, "libgrpc", "--user", "sluice:65532")
    assert r.returncode == 0, r.stderr
    # The closure: libgrpc, libc6, libgcc-s1 (cycle), the installed alternative, the provider of a virtual
    # package; base-files without its awk.
    assert status_packages(root) == ["base-files", "libc6", "libgcc-s1", "libgrpc", "libssl3", "c-ares"]
    assert " multi\n line" in (root / "var/lib/dpkg/status").read_text()  # paragraphs kept whole
    for kept in ["usr/lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libgrpc.so.29",
                 "usr/share/grpc/roots.pem", "usr/lib/x86_64-linux-gnu/libcares.so.2", "etc/os-release", "tmp",
                 "usr/lib/x86_64-linux-gnu/libssl.so", "etc/passwd"]:
        assert os.path.lexists(root / kept), kept
    # /bin/bash and /bin/cat were listed through the merged-usr link: deleted at usr/bin.
    for gone in ["usr/bin/bash", "usr/bin/cat", "usr/bin/ls", "usr/bin/mawk", "etc/bash.bashrc", "usr/share/bash",
                 "usr/share/coreutils", "var/lib/dpkg/info/bash.list", "var/lib/dpkg/info/mawk.postinst",
                 "var/lib/dpkg/status-old", "var/log/dpkg.log"]:
        assert not os.path.lexists(root / gone), gone
    assert os.path.exists(root / "var/lib/dpkg/info/libgrpc.list")
    # The links are still links; the alternatives chain that led to the removed awk is gone.
    assert os.path.islink(root / "bin") and os.path.islink(root / "lib")
    assert not os.path.lexists(root / "etc/alternatives/awk") and not os.path.lexists(root / "usr/bin/awk")
    assert (root / "etc/passwd").read_text().endswith("sluice:x:65532:65532:sluice:/nonexistent:/sbin/nologin\n")
    assert (root / "etc/group").read_text().endswith("sluice:x:65532:\n")
    assert "removed 3: mawk bash coreutils" in r.stderr


def test_a_second_run_changes_nothing(tmp_path):
    root = make_root(tmp_path)
    assert run(root, "libgrpc", "--user", "sluice:65532").returncode == 0
    before = {p: (root / p).read_bytes() for p in ["etc/passwd", "etc/group", "var/lib/dpkg/status"]}
    r = run(root, "libgrpc", "--user", "sluice:65532")
    assert r.returncode == 0, r.stderr
    assert {p: (root / p).read_bytes() for p in before} == before


def test_a_package_that_is_not_installed_is_named(tmp_path):
    root = make_root(tmp_path)
    r = run(root, "libgrpc", "libyaml-cpp0.7")
    assert r.returncode == 1
    assert "packages to keep are not installed in the root: libyaml-cpp0.7 (add them to mmdebstrap --include)" \
        in r.stderr
    assert os.path.exists(root / "usr/bin/bash"), "nothing is deleted after the error"


def test_not_a_debian_root(tmp_path):
    r = run(tmp_path, "libc6")
    assert r.returncode == 2
    assert "has no var/lib/dpkg/status: not a Debian root" in r.stderr


def test_a_link_out_of_the_root_is_refused_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("must survive")
    packages = dict(PACKAGES, evil=("", ["/escape/victim"]))
    root = make_root(tmp_path, packages, links=[("escape", "../../outside")])
    r = run(root, "libgrpc")
    assert r.returncode == 1
    assert "/escape links outside the root (../../outside)" in r.stderr, r.stderr
    assert (outside / "victim").read_text() == "must survive"


def test_an_absolute_link_is_resolved_inside_the_root(tmp_path):
    host_file = tmp_path / "hostfile"
    host_file.write_text("host")
    packages = dict(PACKAGES, abs=("", ["/absdir/file"]))
    # As seen inside the root, /absdir is root/realdir (on the host /realdir would be another place).
    root = make_root(tmp_path, packages, links=[("absdir", "/realdir")])
    (root / "realdir").mkdir()
    (root / "realdir/file").write_text("in root")
    r = run(root, "libgrpc")
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(root / "realdir/file")
    assert host_file.read_text() == "host"


@pytest.mark.parametrize("spec", ["sluice", "sluice:x", ":65532"])
def test_a_malformed_user_is_named(tmp_path, spec):
    root = make_root(tmp_path)
    r = run(root, "libgrpc", "--user", spec)
    assert r.returncode == 1
    assert "--user must be NAME:UID, got %r" % spec in r.stderr
