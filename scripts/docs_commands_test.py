"""Tests of scripts/docs_commands.py (the runner of the docs' commands) and of facts the docs state that a test can
hold to the code (ctest docs_commands_unit). Cheap: no build tree needed, no daemon of the project started."""

import importlib.util
import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "docs_commands.py")

_spec = importlib.util.spec_from_file_location("docs_commands", SCRIPT)
dc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dc)


def doc(text):
    return textwrap.dedent(text).lstrip("\n")


def run_runner(tmp_path, name, text, *extra):
    """Runs the script on one Markdown file with a fake build tree, in this machine's namespaces."""
    md = tmp_path / name
    md.write_text(doc(text))
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, SCRIPT, "--no-isolation", "--build", str(build),
                             "--tools", str(tmp_path / "no-tools"), str(md)] + list(extra),
                            capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    return result, str(md)


# ------------------------------------------------------------------------------------------------ parsing


def test_blocks_tags_and_markers_are_read():
    blocks = dc.parse("x.md", doc("""
        # Title

        ```sh
        echo one
        ```

        <!-- docs-commands: skip (needs a cluster) -->

        ```bash
        kubectl get pods
        ```

        ```yaml
        kind: Pod
        ```

        ```text
        not run
        ```

        <!-- docs-commands: background (ready http://127.0.0.1:1/readyz http://127.0.0.1:2/readyz) -->
        ```sh
        daemon --port 1 \\
            --flag
        other
        ```

        ```console
        $ echo shown
        shown
        ```
        """))
    assert [(b.line, b.lang, b.mode) for b in blocks] == [
        (3, "sh", "run"), (9, "bash", "skip"), (22, "sh", "background"), (28, "console", "run")]
    assert blocks[1].reason == "needs a cluster"
    assert blocks[2].ready == ["http://127.0.0.1:1/readyz", "http://127.0.0.1:2/readyz"]
    assert blocks[2].commands() == [(0, "daemon --port 1      --flag"), (2, "other")]
    assert blocks[3].script() == "echo shown\n"


def test_fences_inside_list_items_and_longer_fences():
    blocks = dc.parse("x.md", doc("""
        1. Step:

           ```sh
           echo indented
           ```

        ````text
        ```sh
        not a block of its own
        ```
        ````
        """))
    assert len(blocks) == 1 and blocks[0].lines == ["echo indented"]


@pytest.mark.parametrize("text, message", [
    ("```\necho hidden\n```\n", "x.md:1: a fenced block without a language"),
    ("<!-- docs-commands: skip -->\n```sh\nfalse\n```\n", "x.md:1: a docs-commands skip needs a reason"),
    ("<!-- docs-commands: skip () -->\n```sh\nfalse\n```\n", "x.md:1: a docs-commands skip needs a reason"),
    ("<!-- docs-commands: background -->\n```sh\nd\n```\n", "x.md:1: a docs-commands background marker names"),
    ("<!-- docs-commands: later (x) -->\n```sh\nd\n```\n", "x.md:1: unknown docs-commands marker 'later'"),
    ("<!-- docs-commands: skip (why) -->\n```yaml\na: 1\n```\n", "x.md:1: a docs-commands marker before a yaml block"),
    ("<!-- docs-commands: skip (why) -->\nprose\n```sh\nd\n```\n", "x.md:1: a docs-commands marker must come right"),
    ("text\n<!-- docs-commands: skip (why) -->\n", "x.md:2: a docs-commands marker not followed by a fenced block"),
    ("```sh\necho never closed\n", "x.md:1: this fenced block is never closed"),
])
def test_malformed_documents_are_refused_naming_file_and_line(text, message):
    with pytest.raises(dc.DocError) as err:
        dc.parse("x.md", text)
    assert message in str(err.value)


def test_the_repositorys_docs_parse_and_every_skip_has_a_reason():
    """Every fenced block of README.md and docs/*.md is tagged, every marker well formed (the run itself is
    ctest docs_commands)."""
    total = 0
    for path in dc.default_files():
        for block in dc.parse(path, label=os.path.relpath(path, REPO)):
            total += 1
            assert block.mode != "skip" or block.reason.strip(), block.where
    assert total > 10


# ------------------------------------------------------------------------------------------------ running


def test_skipped_blocks_do_not_run_and_a_failing_command_names_file_and_line(tmp_path):
    result, md = run_runner(tmp_path, "guide.md", """
        # Guide

        ```sh
        echo first > first.txt
        test -s first.txt
        ```

        <!-- docs-commands: skip (would fail) -->
        ```sh
        echo ran > skipped.txt
        exit 3
        ```

        ```sh
        echo before
        ls no-such-file-anywhere
        echo after
        ```
        """)
    assert result.returncode == 1, result
    # The failing command is named with its file and line (line 16 of the file), with the block's output.
    assert "FAIL %s:16: `ls no-such-file-anywhere` failed (exit status 2)" % md in result.stdout
    assert "before" in result.stdout and "after" not in result.stdout
    assert "skip %s:9 (would fail)" % md in result.stdout
    assert "ok   %s:3" % md in result.stdout
    assert "FAILED %s:16" % md in result.stderr
    assert "2 blocks ran, 1 skipped" in result.stdout


def test_commands_run_in_a_scratch_copy_with_build_bin_on_path(tmp_path):
    result, md = run_runner(tmp_path, "ok.md", """
        ```sh
        test -d scripts && test -f README.md && test -d build/bin
        case ":$PATH:" in *"/build/bin:"*) ;; *) echo "no build/bin on PATH"; exit 1;; esac
        test -z "${KUBECONFIG:-}"
        touch made-here
        test ! -e "$HOME/../../made-here"
        ```

        ```console
        $ test -e made-here
        this line is output and is not run
        ```
        """)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not os.path.exists(os.path.join(REPO, "made-here"))
    assert "2 blocks ran, 0 skipped (each with its reason above), 0 failed" in result.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_background_blocks_start_wait_and_stop_with_sigint(tmp_path):
    port = free_port()
    text = doc("""
        <!-- docs-commands: background (ready http://127.0.0.1:%d/) -->
        ```sh
        %s -m http.server %d --bind 127.0.0.1 --directory .
        ```

        ```sh
        %s -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%d/')"
        ```
        """) % (port, sys.executable, port, sys.executable, port)
    result, md = run_runner(tmp_path, "bg.md", text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok   %s:2 started in the background" % md in result.stdout
    # Stopped: nothing listens on the port any more.
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_background_process_that_exits_early_fails_naming_its_line(tmp_path):
    result, md = run_runner(tmp_path, "bg.md", """
        Start it:

        <!-- docs-commands: background (ready http://127.0.0.1:9/never) -->
        ```sh
        sh -c 'echo cannot start >&2; exit 4'
        ```
        """)
    assert result.returncode == 1
    assert "%s:5: `sh -c 'echo cannot start >&2; exit 4'` exited (status 4)" % md in result.stdout
    assert "cannot start" in result.stdout


def test_a_block_past_its_timeout_fails_and_is_killed(tmp_path):
    marker = tmp_path / "still-running"
    result, md = run_runner(tmp_path, "slow.md", """
        ```sh
        echo started
        sleep 30 && touch %s
        ```
        """ % marker, "--block-timeout", "1")
    assert result.returncode == 1
    assert "FAIL %s:1: the block did not finish within 1 s" % md in result.stdout and "started" in result.stdout
    assert not marker.exists()


def _can_isolate():
    base = ["unshare", "--net", "--mount", "--pid", "--fork"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    try:
        return subprocess.run(base + ["true"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.skipif(not _can_isolate(), reason="no private network and mount namespaces on this machine "
                                               "(needs root or unprivileged user namespaces)")
def test_isolation_gives_a_private_network_and_tmp(tmp_path):
    """Loopback only, and a /tmp of its own (the build tree lives outside /tmp here, as it must for that)."""
    import shutil
    import tempfile
    probe = "/tmp/docs-commands-probe-%d" % os.getpid()
    outside = tempfile.mkdtemp(prefix="docs-commands-test-", dir="/var/tmp")
    open(probe, "w").close()
    try:
        os.makedirs(os.path.join(outside, "build", "bin"))
        md = tmp_path / "iso.md"
        md.write_text(doc("""
            ```sh
            test "$(ip -o link show | wc -l)" = 1
            ip -o link show | grep -q ': lo:'
            test ! -e %s
            touch /tmp/made-inside
            ```
            """ % probe))
        result = subprocess.run([sys.executable, SCRIPT, "--build", os.path.join(outside, "build"),
                                 "--tools", os.path.join(outside, "tools"), str(md)],
                                capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(probe)
        shutil.rmtree(outside, ignore_errors=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not os.path.exists("/tmp/made-inside")


def test_a_malformed_document_exits_2_without_running_anything(tmp_path):
    result, md = run_runner(tmp_path, "bad.md", """
        ```sh
        touch should-not-exist
        ```

        ```
        untagged
        ```
        """)
    assert result.returncode == 2
    assert "%s:5: a fenced block without a language" % md in result.stderr
    assert not (tmp_path / "should-not-exist").exists()


def test_list_prints_each_block_and_its_mode(tmp_path):
    result, md = run_runner(tmp_path, "l.md", """
        <!-- docs-commands: skip (needs a cluster) -->
        ```sh
        kubectl get pods
        ```
        ```sh
        true
        ```
        """, "--list")
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["skip       %s:2 (needs a cluster)" % md, "run        %s:5" % md]


# ------------------------------------------------------------------------------------------------ facts


def yaml_blocks(path, kind):
    with open(path) as fh:
        text = fh.read()
    out = []
    for body in re.findall(r"```yaml\n(.*?)```", text, re.S):
        docs = [d for d in yaml.safe_load_all(body) if d]
        out += [d for d in docs if d.get("kind") == kind]
    return out


def test_security_networkpolicy_example_matches_the_code():
    """The NetworkPolicy example of docs/security.md selects the labels the operator puts on dispatcher and worker
    pods and the chart on its pods, on the CRD's and the chart's default ports."""
    policies = {p["metadata"]["name"]: p for p in yaml_blocks(os.path.join(REPO, "docs", "security.md"),
                                                              "NetworkPolicy")}
    assert set(policies) == {"mnist-dispatcher", "mnist-workers"}
    with open(os.path.join(REPO, "crds", "dataservices.sluice.dev.yaml")) as fh:
        crd = yaml.safe_load(fh)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    ports = {role: (spec[role]["properties"]["port"]["default"], spec[role]["properties"]["metricsPort"]["default"])
             for role in ("dispatcher", "workers")}
    with open(os.path.join(REPO, "operator", "manifests.h")) as fh:
        manifests = fh.read()  # the label names the operator puts on dispatcher and worker pods
    with open(os.path.join(REPO, "helm", "sluice", "templates", "_helpers.tpl")) as fh:
        helpers = fh.read()
    assert "app.kubernetes.io/component: {{ .component }}" in helpers

    for name, role, crd_role in (("mnist-dispatcher", "dispatcher", "dispatcher"),
                                 ("mnist-workers", "worker", "workers")):
        policy = policies[name]
        selected = policy["spec"]["podSelector"]["matchLabels"]
        assert selected == {"sluice.dev/dataservice": "mnist", "sluice.dev/role": role}
        for key in selected:
            assert '"%s"' % key in manifests, key
        assert [r["ports"][0]["port"] for r in policy["spec"]["ingress"]] == list(ports[crd_role])
        for rule in policy["spec"]["ingress"]:
            for peer in rule["from"]:
                labels = (peer.get("podSelector") or {}).get("matchLabels") or {}
                if "app.kubernetes.io/component" in labels:
                    assert labels["app.kubernetes.io/component"] in ("operator", "autoscaler")
                if "sluice.dev/role" in labels:
                    assert labels["sluice.dev/role"] in ("dispatcher", "worker")
    assert 'kLabelRole[] = "sluice.dev/role"' in manifests
    assert 'kLabelDataService[] = "sluice.dev/dataservice"' in manifests


def _anchors(path):
    """GitHub's anchors of a Markdown file's headings (lowercase, punctuation dropped, spaces to hyphens)."""
    out, fenced = set(), False
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
                continue
            m = None if fenced else re.match(r"^#+\s+(.*?)\s*#*\s*$", line)
            if m:
                out.add(re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-"))
    return out


def test_every_relative_link_of_the_docs_resolves():
    """README.md and docs/*.md link to files that exist and to headings those files have."""
    broken = []
    for path in dc.default_files():
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        text = re.sub(r"(`{3,}|~{3,}).*?\1", "", text, flags=re.S)  # fenced blocks
        text = re.sub(r"`[^`\n]*`", "", text)  # code spans
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", link):
                continue  # http:, mailto:, ...
            target, _, anchor = link.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
            where = "%s: (%s)" % (os.path.relpath(path, REPO), link)
            if not os.path.exists(resolved):
                broken.append(where + " names no file")
            elif anchor and resolved.endswith(".md") and anchor not in _anchors(resolved):
                broken.append(where + " names no heading of " + os.path.relpath(resolved, REPO))
    assert not broken, "\n".join(broken)
