"""The API server as a process: port file, bearer tokens (401), RBAC (403), TLS, clean shutdown."""

import os
import signal
import subprocess
import sys

import pytest

from e2e.client import ApiException, KubeClient, KubeConfig, wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(tmp_path, *args):
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "e2e.apiserver", "--port", "0", "--port-file", str(port_file)]
                            + list(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        wait_until(lambda: port_file.exists() or proc.poll() is not None, 20, message="the port file")
    except TimeoutError:
        proc.kill()
        raise
    if proc.poll() is not None:
        raise AssertionError("server exited: %s" % proc.stderr.read().decode())
    return proc, int(port_file.read_text())


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_tokens_rbac_and_tls(tmp_path):
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admin-token,admin,1,"system:masters"\nreader-token,reader,2\n')
    policy = tmp_path / "policy.yaml"
    policy.write_text("users:\n  reader:\n  - {verbs: [get, list], apiGroups: [''], resources: [pods]}\n")
    proc, port = start(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key), "--token-file", str(tokens),
                       "--rbac-policy", str(policy))
    url = "https://127.0.0.1:%d" % port
    try:
        admin = KubeClient(KubeConfig(url, token="admin-token", ca_file=str(cert)))
        assert admin.get("/version")["major"] == "1"
        admin.create("/api/v1/namespaces/default/configmaps",
                     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
        reader = KubeClient(KubeConfig(url, token="reader-token", ca_file=str(cert)))
        assert reader.get("/api/v1/namespaces/default/pods")["items"] == []
        with pytest.raises(ApiException) as exc:
            reader.get("/api/v1/namespaces/default/configmaps/c")
        assert exc.value.status == 403
        assert exc.value.body["message"] == ('configmaps "c" is forbidden: User "reader" cannot get resource '
                                             '"configmaps" in API group "" in the namespace "default"')
        stranger = KubeClient(KubeConfig(url, token="wrong", ca_file=str(cert)))
        with pytest.raises(ApiException) as exc:
            stranger.get("/api/v1/namespaces")
        assert exc.value.status == 401 and "details" not in exc.value.body
        for client in (admin, reader, stranger):
            client.close()
    finally:
        assert stop(proc) == 0


def test_bad_flags_fail_clearly(tmp_path):
    result = subprocess.run([sys.executable, "-m", "e2e.apiserver", "--tls-cert", "x"], cwd=REPO,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "--tls-cert and --tls-key go together" in result.stderr
    result = subprocess.run([sys.executable, "-m", "e2e.apiserver", "--token-file", str(tmp_path / "none.csv")],
                            cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "none.csv" in result.stderr


def test_script_entry_point_prints_url(tmp_path):
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "e2e", "apiserver", "main.py"), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("Listening on http://127.0.0.1:")
        client = KubeClient(KubeConfig(line.split()[-1]))
        assert [n["metadata"]["name"] for n in client.get("/api/v1/namespaces")["items"]] == [
            "default", "kube-node-lease", "kube-public", "kube-system"]
        client.close()
    finally:
        assert stop(proc) == 0
