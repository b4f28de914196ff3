#!/usr/bin/env python3
"""Runs the commands of the documentation, so that none rots (ctest docs_commands).

    scripts/docs_commands.py [--build DIR] [--tools DIR] [--list] [--verbose] [--block-timeout S] [--no-isolation]
                             [FILE.md ...]

Reads README.md and docs/*.md (or the files given) and runs every fenced shell block in order, one document after
another. The rules, which docs/e2e.md#the-commands-of-the-docs describes for writers:

- Every fenced block says what it is: `sh` (also `shell`, `bash`) for commands, `console` for commands as
  `$ command` lines followed by their output (only the `$` lines run), anything else (`text`, `yaml`, `python`,
  ...) for what is not run. A block without a language is an error: it would hide commands from this test.
- An HTML comment on the line before a shell block changes how it runs (blank lines may come between):
    <!-- docs-commands: skip (REASON) -->          not run; REASON is required (e.g. "needs a cluster",
                                                  "long: run by bench tests")
    <!-- docs-commands: background (ready URL...) -->
                                                  each command line starts in the background (its own process
                                                  group); the runner waits until every URL answers 200, and
                                                  stops them with SIGINT (Ctrl-C) at the end of the document,
                                                  expecting exit 0
- A foreground block runs as one `bash -e -o pipefail` script; a failing command fails the test with the file and
  the line of that command, and the block's output.

Blocks run in a scratch directory that looks like the repository (its top-level entries symlinked, `build` the
build tree, `.tools` the tools directory) with `build/bin` and `.tools/bin` first on PATH, HOME in the scratch
directory and KUBECONFIG unset. Where it can (root, or unprivileged user namespaces), the whole run is in a
private network namespace (only loopback: the fixed ports of the docs never meet another process's) with a
private /tmp (emptied between documents), and in a pid namespace, so that nothing it started outlives it.
Exit status: 0 when every block passed, 1 otherwise, 2 on a malformed document or bad arguments.
"""

import argparse
import ctypes
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHELL_LANGS = {"sh", "shell", "bash"}
CONSOLE_LANGS = {"console"}
MARKER = re.compile(r"^\s*<!--\s*docs-commands:\s*(?P<body>.*?)\s*-->\s*$")
MARKER_BODY = re.compile(r"^(?P<verb>[a-z-]+)\s*(?:\((?P<arg>.*)\))?$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
BLOCK_TIMEOUT = 150.0
READY_TIMEOUT = 60.0
STOP_GRACE = 15.0
ISOLATED_ENV = "SLUICE_DOCS_COMMANDS_ISOLATED"


def _die_with_parent(sigint_default=False):
    """preexec_fn: the child gets SIGKILL when this runner dies (PR_SET_PDEATHSIG survives exec), so nothing it
    started outlives it, even when ctest kills it on a timeout; optionally SIGINT back to its default."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if sigint_default:
        signal.signal(signal.SIGINT, signal.SIG_DFL)


class DocError(Exception):
    """A document this runner cannot read as the rules say; the message names the file and line."""


class Block:
    """One fenced block: where it is, its language, its text and how it is to run (run, skip, background)."""

    def __init__(self, path, line, lang, lines, mode="run", reason="", ready=()):
        self.path = path
        self.line = line  # 1-based line of the opening fence
        self.lang = lang
        self.lines = lines
        self.mode = mode
        self.reason = reason
        self.ready = list(ready)

    @property
    def where(self):
        return "%s:%d" % (self.path, self.line)

    def script(self):
        """The shell text to run: the block, or its `$ ` lines for console blocks."""
        if self.lang in CONSOLE_LANGS:
            return "\n".join(l[2:] if l.startswith("$ ") else "" for l in self.lines)
        return "\n".join(self.lines)

    def commands(self):
        """[(line offset in the block, command)] with backslash continuations joined; comments and blanks left out."""
        out, current, start = [], "", 0
        for i, raw in enumerate(self.script().split("\n")):
            line = raw.rstrip()
            if not current:
                start = i
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            out.append((start, current + line))
            current = ""
        if current.strip():
            out.append((start, current))
        return out


def _parse_marker(path, number, text):
    body = MARKER.match(text).group("body")
    m = MARKER_BODY.match(body)
    if not m:
        raise DocError("%s:%d: cannot read the docs-commands marker %r (expected `skip (reason)` or "
                       "`background (ready URL...)`)" % (path, number, body))
    verb, arg = m.group("verb"), (m.group("arg") or "").strip()
    if verb == "skip":
        if not arg:
            raise DocError("%s:%d: a docs-commands skip needs a reason: <!-- docs-commands: skip (why) -->"
                           % (path, number))
        return "skip", arg, []
    if verb == "background":
        words = arg.split()
        if not words or words[0] != "ready" or len(words) < 2:
            raise DocError("%s:%d: a docs-commands background marker names the URLs that say its processes are "
                           "up: <!-- docs-commands: background (ready http://127.0.0.1:PORT/readyz ...) -->"
                           % (path, number))
        return "background", "", words[1:]
    raise DocError("%s:%d: unknown docs-commands marker %r (known: skip, background)" % (path, number, verb))


def parse(path, text=None, label=None):
    """The fenced blocks of a Markdown file, in order. Raises DocError on an untagged block, a marker that is not
    before a shell block, a marker without its argument, or a fence that is never closed."""
    label = label or path
    if text is None:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    lines = text.split("\n")
    blocks = []
    pending = None  # (line number, mode, reason, ready) of a marker waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m:
            fence, indent = m.group("fence"), len(m.group("indent"))
            info = m.group("info").strip()
            lang = info.split()[0].lower() if info else ""
            body, j = [], i + 1
            while j < len(lines):
                close = lines[j].strip()
                if close.startswith(fence[0] * len(fence)) and not close.strip(fence[0]):
                    break
                body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j].lstrip())
                j += 1
            if j == len(lines):
                raise DocError("%s:%d: this fenced block is never closed" % (label, i + 1))
            if not lang:
                raise DocError("%s:%d: a fenced block without a language: tag it `sh` (commands this test runs; "
                               "add <!-- docs-commands: skip (reason) --> before it if they cannot run here) or "
                               "`text` (output, a diagram, a synopsis)" % (label, i + 1))
            block = Block(label, i + 1, lang, body)
            if pending is not None:
                if lang not in SHELL_LANGS | CONSOLE_LANGS:
                    raise DocError("%s:%d: a docs-commands marker before a %s block (markers go before shell "
                                   "blocks)" % (label, pending[0], lang))
                _, block.mode, block.reason, block.ready = pending
                if block.mode == "background" and lang in CONSOLE_LANGS:
                    raise DocError("%s:%d: background blocks are `sh`, not console" % (label, pending[0]))
                pending = None
            if lang in SHELL_LANGS | CONSOLE_LANGS:
                blocks.append(block)
            i = j + 1
            continue
        if MARKER.match(line):
            if pending is not None:
                raise DocError("%s:%d: a docs-commands marker not followed by a fenced block" % (label, pending[0]))
            pending = (i + 1,) + _parse_marker(label, i + 1, line)
        elif line.strip() and pending is not None:
            raise DocError("%s:%d: a docs-commands marker must come right before its fenced block" %
                           (label, pending[0]))
        i += 1
    if pending is not None:
        raise DocError("%s:%d: a docs-commands marker not followed by a fenced block" % (label, pending[0]))
    return blocks


# ------------------------------------------------------------------------------------------------ isolation


def _in_private_tmp(paths):
    return not any(os.path.realpath(p) == "/tmp" or os.path.realpath(p).startswith("/tmp/") for p in paths if p)


def isolate(argv, needed_paths):
    """Re-runs this script in a private network and mount namespace when it can; returns the exit code then, or
    None to go on here (already isolated, or isolation unavailable)."""
    if os.environ.get(ISOLATED_ENV):
        return None
    unshare = shutil.which("unshare")
    if unshare is None:
        print("docs-commands: no unshare: running in this machine's network namespace and /tmp", file=sys.stderr)
        return None
    # A pid namespace too: when the runner (its first process) dies, the kernel kills everything the blocks
    # started, grandchildren included.
    base = [unshare, "--net", "--mount", "--pid", "--fork", "--kill-child"] + (
        [] if os.geteuid() == 0 else ["--map-root-user"])
    probe = subprocess.run(base + ["true"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("docs-commands: cannot make a private network namespace (%s): running in this machine's"
              % probe.stderr.strip(), file=sys.stderr)
        return None
    env = dict(os.environ)
    env[ISOLATED_ENV] = "private-tmp" if _in_private_tmp(needed_paths) else "shared-tmp"
    return subprocess.call(base + [sys.executable, os.path.abspath(__file__)] + argv, env=env,
                           preexec_fn=_die_with_parent)


def setup_isolation():
    """Inside the namespaces: loopback up, and a fresh tmpfs on /tmp unless a path we need lives there."""
    mode = os.environ.get(ISOLATED_ENV)
    if not mode:
        return False
    steps = [["ip", "link", "set", "lo", "up"]]
    if mode == "private-tmp":
        steps += [["mount", "--make-rprivate", "/"], ["mount", "-t", "tmpfs", "-o", "mode=1777", "docs-commands-tmp", "/tmp"]]
    else:
        print("docs-commands: the build or tools directory is under /tmp: /tmp stays shared", file=sys.stderr)
    for step in steps:
        try:
            result = subprocess.run(step, capture_output=True, text=True)
        except OSError as exc:
            raise DocError("cannot set up the private namespaces: %s: %s (iproute2 and mount are needed; "
                           "or run with --no-isolation)" % (step[0], exc))
        if result.returncode != 0:
            raise DocError("cannot set up the private namespaces: `%s` failed: %s (or run with --no-isolation)"
                           % (" ".join(step), result.stderr.strip()))
    return mode == "private-tmp"


def clean_tmp(keep):
    for name in os.listdir("/tmp"):
        path = os.path.join("/tmp", name)
        if os.path.realpath(path) == os.path.realpath(keep) or os.path.realpath(keep).startswith(path + "/"):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


# ------------------------------------------------------------------------------------------------ running


def make_sandbox(root, build, tools):
    """A directory that looks like the repository: its top-level entries as symlinks, build and .tools too."""
    work = os.path.join(root, "repo")
    os.makedirs(os.path.join(root, "home"))
    os.makedirs(work)
    for name in os.listdir(REPO):
        if name in (".git", "build", ".tools") or name.startswith("build-"):
            continue
        os.symlink(os.path.join(REPO, name), os.path.join(work, name))
    os.symlink(os.path.abspath(build), os.path.join(work, "build"))
    if tools and os.path.isdir(tools):
        os.symlink(os.path.abspath(tools), os.path.join(work, ".tools"))
    return work


def block_env(work, home):
    env = dict(os.environ)
    for name in ("KUBECONFIG", ISOLATED_ENV, "CDPATH", "BASH_ENV", "ENV"):
        env.pop(name, None)
    env["HOME"] = home
    env["PATH"] = os.pathsep.join([os.path.join(work, "build", "bin"), os.path.join(work, ".tools", "bin"),
                                   env.get("PATH", "/usr/bin:/bin")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# One line before the block, so a failing command's $LINENO - 1 is its line in the block.
PRELUDE = ("trap 'echo \"docs-commands: exit status $? at block line $((LINENO - 1))\" >&2' ERR; "
           "set -eE -o pipefail\n")
FAILED_LINE = re.compile(r"docs-commands: exit status (\d+) at block line (\d+)")


def _tail(text, lines=40):
    return "\n".join(text.rstrip("\n").split("\n")[-lines:])


def run_foreground(block, work, env, timeout=BLOCK_TIMEOUT, echo=None):
    """None when the block succeeded, else a message naming the file and line. `echo`: a stream to copy the
    block's output to."""
    proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-c", PRELUDE + block.script()], cwd=work, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_die_with_parent)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return "%s: the block did not finish within %d s\n%s" % (block.where, timeout, _tail(output))
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what the block left running in the background
        except (ProcessLookupError, PermissionError):
            pass
    if echo is not None:
        echo.write(output)
    if proc.returncode == 0:
        return None
    m = None
    for m in FAILED_LINE.finditer(output):
        pass
    if m:
        offset = int(m.group(2))
        text = block.script().split("\n")
        command = text[offset - 1].strip() if 0 < offset <= len(text) else ""
        return "%s:%d: `%s` failed (exit status %s)\n%s" % (block.path, block.line + offset, command,
                                                              m.group(1), _tail(output))
    return "%s: the block exited with status %d\n%s" % (block.where, proc.returncode, _tail(output))


class Background:
    """The processes of a background block."""

    def __init__(self, block, work, env, log_dir):
        self.block = block
        self.procs = []
        for n, (offset, command) in enumerate(block.commands()):
            log = os.path.join(log_dir, "bg-%d-%d.log" % (block.line, n))
            fh = open(log, "wb")
            proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-c", "exec " + command], cwd=work, env=env,
                                    stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=lambda: _die_with_parent(sigint_default=True))
            fh.close()
            self.procs.append((block.line + 1 + offset, command, proc, log))

    def log_of(self, log):
        with open(log, "rb") as fh:
            return _tail(fh.read().decode("utf-8", "replace"))

    def wait_ready(self, timeout=READY_TIMEOUT):
        deadline = time.monotonic() + timeout
        pending = list(self.block.ready)
        while pending:
            for line, command, proc, log in self.procs:
                if proc.poll() is not None:
                    return "%s:%d: `%s` exited (status %d) before %s answered\n%s" % (
                        self.block.path, line, command, proc.returncode, pending[0], self.log_of(log))
            try:
                with urllib.request.urlopen(pending[0], timeout=2) as resp:
                    if resp.status == 200:
                        pending.pop(0)
                        continue
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                return "%s: %s did not answer 200 within %d s\n%s" % (
                    self.block.where, pending[0], timeout,
                    "\n".join(self.log_of(log) for _, _, _, log in self.procs))
            time.sleep(0.1)
        return None

    def stop(self):
        """SIGINT (as Ctrl-C) to each, SIGKILL after a grace period; a message for each that did not exit 0."""
        problems = []
        for _, _, proc, _ in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        for line, command, proc, log in self.procs:
            try:
                code = proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                code = None
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            if code is None:
                problems.append("%s:%d: `%s` did not stop within %d s of SIGINT\n%s" % (
                    self.block.path, line, command, STOP_GRACE, self.log_of(log)))
            elif code != 0:
                problems.append("%s:%d: `%s` exited with status %d on SIGINT\n%s" % (
                    self.block.path, line, command, code, self.log_of(log)))
        return problems


def run_document(blocks, work, env, log_dir, out=sys.stdout, verbose=False, timeout=BLOCK_TIMEOUT):
    """Runs one document's blocks; returns (ran, skipped, failures)."""
    ran, skipped, failures, background = 0, 0, [], []
    try:
        for block in blocks:
            if block.mode == "skip":
                skipped += 1
                print("skip %s (%s)" % (block.where, block.reason), file=out, flush=True)
                continue
            start = time.monotonic()
            if block.mode == "background":
                bg = Background(block, work, env, log_dir)
                background.append(bg)
                problem = bg.wait_ready()
            else:
                problem = run_foreground(block, work, env, timeout=timeout, echo=out if verbose else None)
            ran += 1
            if problem:
                failures.append(problem)
                print("FAIL %s" % problem, file=out, flush=True)
                break  # later blocks of a document usually need the earlier ones
            print("ok   %s %s(%.1f s)" % (block.where, "started in the background " if block.mode == "background"
                                          else "", time.monotonic() - start), file=out, flush=True)
    finally:
        for bg in reversed(background):
            for problem in bg.stop():
                failures.append(problem)
                print("FAIL %s" % problem, file=out, flush=True)
    return ran, skipped, failures


def default_files():
    return [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="Markdown files (default: README.md and docs/*.md)")
    parser.add_argument("--build", default=os.environ.get("SLUICE_BINARY_DIR") or os.path.join(REPO, "build"),
                        help="the build tree (default: $SLUICE_BINARY_DIR, else build/)")
    parser.add_argument("--tools", default=os.environ.get("SLUICE_TOOLS_DIR") or os.path.join(REPO, ".tools"),
                        help="Helm and kubectl's directory (default: $SLUICE_TOOLS_DIR, else .tools/)")
    parser.add_argument("--list", action="store_true", help="only list the shell blocks and how each would run")
    parser.add_argument("--verbose", action="store_true", help="print the output of every block that runs")
    parser.add_argument("--block-timeout", type=float, default=BLOCK_TIMEOUT,
                        help="seconds a block may run (default %(default)s)")
    parser.add_argument("--no-isolation", action="store_true",
                        help="run in this machine's network namespace and /tmp")
    args = parser.parse_args(argv)
    files = [os.path.abspath(f) for f in args.files] or default_files()
    documents = []
    try:
        for path in files:
            label = os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path
            documents.append((label, parse(path, label=label)))
    except (DocError, OSError) as exc:
        print("docs-commands: %s" % exc, file=sys.stderr)
        return 2
    if args.list:
        for _, blocks in documents:
            for b in blocks:
                print("%-10s %s%s" % (b.mode, b.where, " (%s)" % b.reason if b.reason else ""))
        return 0
    if not os.path.isdir(os.path.join(args.build, "bin")):
        print("docs-commands: no build tree at %s (no bin/ there); build first or pass --build" % args.build,
              file=sys.stderr)
        return 2
    if not args.no_isolation:
        code = isolate(argv, [args.build, args.tools, REPO, sys.executable])
        if code is not None:
            return code
    try:
        private_tmp = setup_isolation()
    except DocError as exc:
        print("docs-commands: %s" % exc, file=sys.stderr)
        return 2
    root = tempfile.mkdtemp(prefix="sluice-docs-commands-")
    total_ran, total_skipped, failures = 0, 0, []
    try:
        work = make_sandbox(root, args.build, args.tools)
        env = block_env(work, os.path.join(root, "home"))
        log_dir = os.path.join(root, "logs")
        os.makedirs(log_dir)
        for _, blocks in documents:
            if private_tmp:
                clean_tmp(root)
            ran, skipped, failed = run_document(blocks, work, env, log_dir, verbose=args.verbose,
                                                timeout=args.block_timeout)
            total_ran += ran
            total_skipped += skipped
            failures += failed
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("docs-commands: %d blocks ran, %d skipped (each with its reason above), %d failed"
          % (total_ran, total_skipped, len(failures)))
    if failures:
        print("\n".join("FAILED " + f.split("\n")[0] for f in failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
