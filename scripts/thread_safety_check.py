#!/usr/bin/env python3
"""Checks the project's thread-safety annotations with clang's -Wthread-safety analysis.

g++ (the project's compiler) ignores ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED and the other
Abseil thread-safety macros. This script runs clang over the translation units that use them:

  clang++ -fsyntax-only -Wno-everything -Wthread-safety -Werror=thread-safety <the file's own flags>

with each file's flags taken from compile_commands.json (CMake writes it: CMAKE_EXPORT_COMPILE_COMMANDS),
g++-only flags dropped, and only the thread-safety warnings enabled (clang's other warnings differ
from g++'s and are not this check's business). Any finding, or a file clang cannot compile, fails.

Which translation units (a simple rule, cheap enough for CI): a project source (inside the source
tree, not generated into the build directory) is checked when it, or its own header (foo.cc's
foo.h), contains one of the macros in ANNOTATIONS. The analysis reports function bodies that touch
guarded members or call annotated functions; guarded members are private, so those bodies are in
the class's own .cc or inline in its header, which that .cc includes. What the rule misses: a file
that neither annotates nor implements an annotated class, yet calls an annotated function of one
while holding (or not holding) its lock through an accessor. --wide also checks every file that
includes an annotated project header directly (about twice the files and the time).

Speed: the files that share their flags (defines, -O and -fPIC/-fPIE aside) and see the generated service
headers read one clang precompiled header (PCH_HEADERS, built per run into BUILD/thread_safety_check): about
40% less CPU. A file that fails with it is checked again without it, and that verdict counts (--no-pch: never).

Usage: scripts/thread_safety_check.py [--build-dir build] [--jobs 2] [--clang clang++] [--wide] [--no-pch] [FILE...]
With FILEs: checks exactly those (with the flags of their compile command, or of --flags-from's
when they have none: for a file outside the build such as testing/thread_safety_violation.cc).
Progress on stderr, a summary on stdout; exit status 1 on any finding or failure, 2 on bad usage.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import time

ANNOTATIONS = re.compile(
    rb"\bABSL_(GUARDED_BY|PT_GUARDED_BY|EXCLUSIVE_LOCKS_REQUIRED|SHARED_LOCKS_REQUIRED|LOCKS_EXCLUDED"
    rb"|EXCLUSIVE_LOCK_FUNCTION|SHARED_LOCK_FUNCTION|UNLOCK_FUNCTION|EXCLUSIVE_TRYLOCK_FUNCTION"
    rb"|ASSERT_EXCLUSIVE_LOCK|ACQUIRED_AFTER|ACQUIRED_BEFORE|SCOPED_LOCKABLE|LOCKABLE)\b")
INCLUDE = re.compile(rb'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)

# g++ flags clang rejects or that make no sense for -fsyntax-only.
DROP_FLAGS = {"-fno-semantic-interposition", "-fconcepts-diagnostics-depth", "-fmax-errors",
              "-fno-canonical-system-headers", "-Wno-maybe-uninitialized", "-fcf-protection", "-Winvalid-pch"}
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}
DROP_PREFIXES = ("-fconcepts-diagnostics-depth=", "-fmax-errors=", "-fdiagnostics-color", "-MD", "-MMD")
# CMake's precompiled-header include (target_precompile_headers), whose .gch only g++ reads.
PCH_SUFFIXES = ("cmake_pch.hxx", "cmake_pch.h")


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def annotated(path, cache):
    if path not in cache:
        cache[path] = bool(ANNOTATIONS.search(read(path)))
    return cache[path]


def uses_annotations(path, source_dir, cache, wide):
    """True when `path` or its own header (or with `wide`, a project header it includes directly)
    contains an annotation macro."""
    if annotated(path, cache) or annotated(os.path.splitext(path)[0] + ".h", cache):
        return True
    if not wide:
        return False
    text = read(path)
    for inc in INCLUDE.findall(text):
        inc = inc.decode("utf-8", "replace")
        for candidate in (os.path.join(source_dir, inc), os.path.join(os.path.dirname(path), inc)):
            candidate = os.path.normpath(candidate)
            if os.path.isfile(candidate):
                if annotated(candidate, cache):
                    return True
                break
    return False


def clang_args(entry, clang, source_file):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = [clang]
    skip = False
    saw_file = False
    for i, a in enumerate(args):
        if i == 0:
            continue
        if skip:
            skip = False
            continue
        if a in DROP_WITH_VALUE:
            skip = True
            continue
        if a == "-include" and i + 1 < len(args) and args[i + 1].endswith(PCH_SUFFIXES):
            skip = True  # g++'s precompiled header (cmake_pch.hxx): clang parses the sources' own includes
            continue
        if a == "-c":
            continue
        if a in DROP_FLAGS or a.startswith(DROP_PREFIXES):
            continue
        if os.path.normpath(os.path.join(entry["directory"], a)) == os.path.normpath(entry["file"]):
            out.append(source_file)
            saw_file = True
            continue
        out.append(a)
    if not saw_file:
        out.append(source_file)
    out[1:1] = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety",
                "-Wno-unknown-warning-option", "-fno-caret-diagnostics"]
    return out


# The headers most checked files parse (gRPC and the generated service stubs, Abseil, the standard
# library): precompiled once per run (clang PCH, a few CPU-seconds) they save 1-3 CPU-s per file.
PCH_HEADERS = ["algorithm", "atomic", "chrono", "condition_variable", "deque", "functional", "map", "memory",
               "mutex", "optional", "set", "string", "thread", "unordered_map", "vector",
               "absl/status/status.h", "absl/status/statusor.h", "absl/strings/str_cat.h",
               "absl/synchronization/mutex.h", "absl/time/time.h", "grpcpp/grpcpp.h", "dataservice.grpc.pb.h"]
PCH_MIN_FILES = 8  # fewer files do not repay building the header


def pch_flags(args, source):
    """A file's clang arguments as the shared precompiled header needs them: without the source, the
    optimization level (only __OPTIMIZE__ for -fsyntax-only) and -fPIC/-fPIE (only __PIC__/__PIE__),
    with -pthread (_REENTRANT). Files whose remaining flags equal the header's use it."""
    out = [a for a in args[1:] if a != source and a not in ("-fPIC", "-fPIE", "-fpic", "-fpie", "-pthread")
           and not re.fullmatch(r"-O[0-3sgz]?", a)]
    return ["-pthread"] + out


def pch_key(args, source):
    return tuple(a for a in pch_flags(args, source) if not a.startswith("-D"))


def build_pch(jobs, clang, build_dir):
    """Builds a clang PCH for the largest group of jobs with the same flags (defines aside) that sees the
    generated service headers; returns ({job index: arguments using it}, seconds), or ({}, 0) on failure."""
    groups = {}
    for i, (path, args, _) in enumerate(jobs):
        if any(a.startswith("-I") and a.endswith(os.sep + "proto") for a in args):
            groups.setdefault(pch_key(args, path), []).append(i)
    if not groups:
        return {}, 0
    key, members = max(groups.items(), key=lambda kv: len(kv[1]))
    if len(members) < PCH_MIN_FILES:
        return {}, 0
    start = time.monotonic()
    out_dir = os.path.join(build_dir, "thread_safety_check")
    os.makedirs(out_dir, exist_ok=True)
    header = os.path.join(out_dir, "pch.h")
    # Written under this process's own names, then renamed: another run on this build tree keeps its own.
    tmp = f".{os.getpid()}"
    with open(header + tmp, "w") as f:
        f.write("".join(f"#include <{h}>\n" for h in PCH_HEADERS))
    os.replace(header + tmp, header)
    pch = header + ".pch"
    args = [clang, "-x", "c++-header", *[a for a in key if a != "-fsyntax-only"], header, "-o", pch + tmp]
    p = subprocess.run(args, cwd=build_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode == 0:
        os.replace(pch + tmp, pch)
    if p.returncode != 0:
        print(f"thread_safety_check: no precompiled header (each file parses its headers): {p.stdout[-500:]}",
              file=sys.stderr)
        return {}, 0
    with_pch = {}
    for i in members:
        path, args, _ = jobs[i]
        with_pch[i] = [args[0], "-include-pch", pch, *pch_flags(args, path), path]
    return with_pch, time.monotonic() - start


def check(job):
    path, args, directory, plain_args = job
    start = time.monotonic()
    p = subprocess.run(args, cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0 and plain_args is not None:
        # Not a finding of the precompiled header's making: the verdict is the file's own, without it.
        p = subprocess.run(plain_args, cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return path, p.returncode, p.stdout, time.monotonic() - start


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source-dir", default=os.path.dirname(here))
    ap.add_argument("--build-dir", default=None, help="holds compile_commands.json (default: SOURCE/build)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--clang", default="clang++")
    ap.add_argument("--flags-from", default="testing/catch_main.cc",
                    help="for FILEs without a compile command: use this source's flags")
    ap.add_argument("--wide", action="store_true",
                    help="also check files that include an annotated project header directly")
    ap.add_argument("--list", action="store_true", help="print the selected files and exit")
    ap.add_argument("--no-pch", action="store_true",
                    help="no shared precompiled header (it is built in BUILD/thread_safety_check when 8+ files share flags)")
    ap.add_argument("files", nargs="*")
    opts = ap.parse_args()
    source_dir = os.path.abspath(opts.source_dir)
    build_dir = os.path.abspath(opts.build_dir or os.path.join(source_dir, "build"))
    db_path = os.path.join(build_dir, "compile_commands.json")
    try:
        with open(db_path) as f:
            db = json.load(f)
    except (OSError, ValueError) as e:
        print(f"thread_safety_check: cannot read {db_path}: {e} (configure with CMake first)", file=sys.stderr)
        return 2
    if opts.jobs < 1:
        print("thread_safety_check: --jobs must be >= 1", file=sys.stderr)
        return 2
    by_file = {}
    for entry in db:
        path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
        entry["file"] = path
        by_file.setdefault(path, entry)

    jobs = []
    if opts.files:
        fallback = by_file.get(os.path.normpath(os.path.join(source_dir, opts.flags_from)))
        for f in opts.files:
            path = os.path.abspath(f)
            entry = by_file.get(path) or fallback
            if entry is None:
                print(f"thread_safety_check: no compile command for {f} nor for --flags-from", file=sys.stderr)
                return 2
            if not os.path.isfile(path):
                print(f"thread_safety_check: {f} does not exist", file=sys.stderr)
                return 2
            jobs.append((path, clang_args(entry, opts.clang, path), entry["directory"]))
    else:
        cache = {}
        for path, entry in sorted(by_file.items()):
            inside = path.startswith(source_dir + os.sep) and not path.startswith(build_dir + os.sep)
            if inside and path.endswith((".cc", ".cpp")) and uses_annotations(path, source_dir, cache, opts.wide):
                jobs.append((path, clang_args(entry, opts.clang, path), entry["directory"]))
    if opts.list:
        for path, _, _ in jobs:
            print(os.path.relpath(path, source_dir))
        return 0
    if not jobs:
        print("thread_safety_check: no translation unit uses thread-safety annotations", file=sys.stderr)
        return 1

    start = time.monotonic()
    with_pch, pch_seconds = ({}, 0) if opts.no_pch else build_pch(jobs, opts.clang, build_dir)
    if with_pch:
        print(f"thread_safety_check: precompiled header for {len(with_pch)} of {len(jobs)} files "
              f"({pch_seconds:.1f} s)", file=sys.stderr, flush=True)
    jobs = [(path, with_pch[i], directory, args) if i in with_pch else (path, args, directory, None)
            for i, (path, args, directory) in enumerate(jobs)]
    failed = []
    findings = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=opts.jobs) as pool:
        for n, (path, rc, output, seconds) in enumerate(pool.map(check, jobs), 1):
            rel = os.path.relpath(path, source_dir)
            verdict = "ok" if rc == 0 else "FAILED"
            print(f"[{n}/{len(jobs)}] {verdict} {rel} ({seconds:.1f} s)", file=sys.stderr, flush=True)
            if rc != 0:
                failed.append(rel)
                findings += len(re.findall(r"-Wthread-safety[-\w]*\]", output))
                sys.stderr.write(output)
    wall = time.monotonic() - start
    print(f"thread_safety_check: {len(jobs)} files, {len(failed)} failed, {findings} thread-safety findings, "
          f"{wall:.0f} s wall "
          f"({opts.jobs} jobs, {opts.clang}, precompiled header for {len(with_pch)})")
    for rel in failed:
        print(f"  failed: {rel}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
