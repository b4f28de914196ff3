#!/usr/bin/python3
"""Cuts an mmdebstrap root file system down to the runtime libraries Sluice's binaries need.

Run by scripts/images.sh as mmdebstrap's last customize hook, on the host (Debian's python3), with the root
directory as its first argument: `minimize_rootfs.py ROOT PACKAGE...`. The packages named and their Depends and
Pre-Depends closure among the installed ones are kept (and base-files alone); every file of every other package is
deleted — the shell, coreutils, dpkg, perl, login, apt's and dpkg's state of the removed packages — and
/var/lib/dpkg/status is rewritten to list exactly the kept packages, so an image scanner still sees what the
image holds. Files no package owns (generated at install time: /etc/passwd, /etc/group, /etc/nsswitch.conf,
/etc/ld.so.cache, the CA bundle /etc/ssl/certs/ca-certificates.crt) stay; symlinks left dangling are removed.
It also adds the image's non-root user (--user NAME:UID).

Paths are resolved inside ROOT only (merged-usr: /bin/x is /usr/bin/x); a link that would lead outside ROOT
is an error, never followed. Single-threaded; it changes nothing outside ROOT.
"""

import argparse
import os
import re
import sys

# Kept without its dependencies (base-files pre-depends on awk for its maintainer scripts only).
ALWAYS_KEPT = ["base-files"]
# Generated state with no package owner that a runtime image does not need.
STATE_TO_CLEAR = ["var/cache/debconf", "var/log", "var/lib/dpkg/status-old", "var/lib/dpkg/available",
                  "var/lib/dpkg/diversions-old", "var/lib/dpkg/statoverride-old", "var/cache/ldconfig/aux-cache"]


class Error(Exception):
    pass


def resolve(root, path, follow_last=False, depth=0):
    """The real location of `path` (absolute, as seen inside root) on the host, every symlink resolved inside
    root (the last component only if follow_last)."""
    if depth > 40:
        raise Error("too many levels of symbolic links at %s" % path)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    current = root
    for i, part in enumerate(parts):
        if part == "..":
            current = os.path.dirname(current) if current != root else root
            continue
        candidate = os.path.join(current, part)
        last = i == len(parts) - 1
        if os.path.islink(candidate) and (follow_last or not last):
            target = os.readlink(candidate)
            inside = target if target.startswith("/") else "/" + os.path.relpath(
                os.path.join(current, target), root)
            resolved = os.path.normpath(os.path.join(root, inside.lstrip("/")))
            if resolved != root and not resolved.startswith(root + os.sep):
                raise Error("%s links outside the root (%s)" % (path, target))
            current = resolve(root, inside, True, depth + 1)
        else:
            current = candidate
    return current


def read_status(root):
    """Paragraphs of var/lib/dpkg/status as (package name, text, fields) in file order."""
    with open(os.path.join(root, "var/lib/dpkg/status"), encoding="utf-8") as f:
        text = f.read()
    paragraphs = []
    for block in re.split(r"\n\s*\n", text.strip()):
        fields = {}
        key = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line
            else:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        paragraphs.append((fields["Package"], block, fields))
    return paragraphs


def dependency_names(fields):
    """Package names a paragraph depends on; of alternatives (a | b) all are returned, callers keep the
    installed ones."""
    names = []
    for key in ("Pre-Depends", "Depends"):
        for clause in fields.get(key, "").split(","):
            for alt in clause.split("|"):
                name = alt.strip().split(" ")[0].split(":")[0]
                if name:
                    names.append(name)
    return names


def closure(paragraphs, wanted):
    installed = {name: fields for name, _, fields in paragraphs if "installed" in fields.get("Status", "")}
    provides = {}
    for name, fields in installed.items():
        for p in fields.get("Provides", "").split(","):
            p = p.strip().split(" ")[0]
            if p:
                provides.setdefault(p, []).append(name)
    missing = [w for w in wanted if w not in installed]
    if missing:
        raise Error("packages to keep are not installed in the root: %s (add them to mmdebstrap --include)"
                    % " ".join(missing))
    keep, todo = set(), list(wanted)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        for dep in dependency_names(installed[name]):
            for candidate in [dep] + provides.get(dep, []):
                if candidate in installed and candidate not in keep:
                    todo.append(candidate)
    return keep


def package_files(root, name):
    info = os.path.join(root, "var/lib/dpkg/info")
    for list_name in (name + ".list", name + ":amd64.list"):
        path = os.path.join(info, list_name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return [line.rstrip("\n") for line in f if line.strip() and line.strip() != "/."]
    return []


def canonical(root, path):
    """Host location of the entry itself (its parent directories resolved, the entry not followed)."""
    return os.path.join(resolve(root, os.path.dirname(path), True), os.path.basename(path))


def minimize(root, wanted, user):
    root = os.path.realpath(root)
    paragraphs = read_status(root)
    keep = closure(paragraphs, wanted) | set(ALWAYS_KEPT)
    kept_paths = set()
    for name in keep:
        kept_paths.update(canonical(root, p) for p in package_files(root, name))
    removed = [name for name, _, _ in paragraphs if name not in keep]
    # Every path is resolved before anything is deleted: an error leaves the root as it was.
    doomed = [canonical(root, path) for name in removed for path in package_files(root, name)]
    directories = set()
    for host in doomed:
        if host in kept_paths or not os.path.lexists(host):
            continue
        if os.path.isdir(host) and not os.path.islink(host):
            directories.add(host)
        else:
            os.unlink(host)
    for host in sorted(directories, key=len, reverse=True):
        if not os.listdir(host):
            os.rmdir(host)
    info = os.path.join(root, "var/lib/dpkg/info")
    for entry in os.listdir(info):
        if entry.split(".")[0].split(":")[0] not in keep:
            os.unlink(os.path.join(info, entry))
    with open(os.path.join(root, "var/lib/dpkg/status"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(block for name, block, _ in paragraphs if name in keep) + "\n")
    for rel in STATE_TO_CLEAR:
        path = os.path.join(root, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            for dirpath, dirnames, filenames in os.walk(path, topdown=False):
                for n in filenames:
                    os.unlink(os.path.join(dirpath, n))
                for n in dirnames:
                    full = os.path.join(dirpath, n)
                    os.unlink(full) if os.path.islink(full) else os.rmdir(full)
        elif os.path.lexists(path):
            os.unlink(path)
    remove_dangling_links(root)
    if user:
        add_user(root, user)
    return keep, removed


def remove_dangling_links(root):
    """Removes symlinks whose target does not exist, on the root's own file system only (mmdebstrap's hooks run
    with /proc, /sys and /dev mounted)."""
    device = os.lstat(root).st_dev
    changed = True
    while changed:  # a link to a link removed in this pass dangles in the next
        changed = False
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))
                           or os.lstat(os.path.join(dirpath, d)).st_dev == device]
            for n in dirnames + filenames:
                full = os.path.join(dirpath, n)
                if not os.path.islink(full):
                    continue
                try:
                    target = resolve(root, "/" + os.path.relpath(full, root), True)
                except Error:
                    target = None
                if target is None or not os.path.lexists(target):
                    os.unlink(full)
                    changed = True


def parse_user(spec):
    name, _, uid = spec.partition(":")
    if not name or not uid.isdigit():
        raise Error("--user must be NAME:UID, got %r" % spec)
    return name, uid


def add_user(root, spec):
    name, uid = parse_user(spec)
    for rel, line in (("etc/passwd", "%s:x:%s:%s:%s:/nonexistent:/sbin/nologin\n" % (name, uid, uid, name)),
                      ("etc/group", "%s:x:%s:\n" % (name, uid))):
        path = os.path.join(root, rel)
        with open(path, encoding="utf-8") as f:
            existing = f.read()
        if any(l.split(":")[0] == name for l in existing.splitlines()):
            continue
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="root directory (mmdebstrap's $1)")
    parser.add_argument("packages", nargs="+", help="packages to keep, with their dependency closure")
    parser.add_argument("--user", help="NAME:UID of the non-root user to add (group NAME with the same id)")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.root, "var/lib/dpkg/status")):
        print("minimize_rootfs: %s has no var/lib/dpkg/status: not a Debian root" % args.root, file=sys.stderr)
        return 2
    try:
        if args.user:
            parse_user(args.user)
        keep, removed = minimize(args.root, args.packages, args.user)
    except Error as e:
        print("minimize_rootfs: %s" % e, file=sys.stderr)
        return 1
    print("minimize_rootfs: kept %d packages, removed %d: %s" % (len(keep), len(removed), " ".join(removed)),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
