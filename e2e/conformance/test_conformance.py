"""Every recorded exchange in kube-fixtures must be answered alike by the test API server.

The chained fixture files are replayed in recording order on one fresh in-process server (later files rely on
objects earlier ones created); auth-errors runs on its own server with tokens and an RBAC policy, and the files
recorded on clusters of their own (crd-validation, dataservice-validation, autoscaler-writes) each on a fresh
server prepared as replay.SETUPS says. Adjusted requests, actions standing in for a cluster's controllers,
known deviations and messages compared by verdict only are documented in replay.py and reported as warnings,
never skipped silently.
"""

import os
import tempfile
import warnings

import pytest

from e2e.apiserver import ApiServer, Config
from e2e.client import KubeClient, KubeConfig
from e2e.conformance import replay


class _ChainSession:
    """Runs chained fixture files in order on one server, once each, caching the results."""

    def __init__(self):
        self.server = ApiServer(Config(port=0)).start()
        self.client = KubeClient(KubeConfig(self.server.url), user_agent=replay.USER_AGENT)
        self.replayer = replay.Replayer(self.client)
        self.results = {}

    def results_for(self, name):
        for file in replay.CHAIN:
            if file not in self.results:
                self.results[file] = self.replayer.run_file(file, replay.load(file))
            if file == name:
                return self.results[file]
        raise KeyError(name)

    def close(self):
        self.client.close()
        self.server.shutdown()


@pytest.fixture(scope="module")
def chain():
    session = _ChainSession()
    yield session
    session.close()


def _check(results):
    problems = []
    for result in results:
        if result.adjustment:
            warnings.warn("%s: replayed with an adjustment: %s" % (result.label(), result.adjustment))
        if result.deviation:
            warnings.warn("%s: known deviation: %s" % (result.label(), result.deviation["reason"]))
        if result.verdict_only:
            warnings.warn("%s: messages compared by verdict only: %s" % (result.label(), result.verdict_only))
        for failure in result.failures():
            problems.append("%s: %s" % (result.label(), failure))
    assert not problems, "\n".join(problems)


def test_every_fixture_file_is_replayed():
    assert sorted(replay.CHAIN + replay.SEPARATE) == replay.all_fixture_names()


@pytest.mark.parametrize("name", replay.CHAIN)
def test_chained_fixture(chain, name):
    _check(chain.results_for(name))


def test_auth_errors():
    with tempfile.TemporaryDirectory() as tmp:
        token_file = os.path.join(tmp, "tokens.csv")
        with open(token_file, "w") as fh:
            fh.write('admin-token,admin,1,"system:masters"\nviewer-token,viewer,2\n')
        policy = os.path.join(tmp, "rbac.yaml")
        with open(policy, "w") as fh:
            fh.write("users:\n  viewer:\n    - {verbs: [get], apiGroups: [''], resources: [configmaps]}\n")
        server = ApiServer(Config(port=0, token_file=token_file, rbac_policy=policy)).start()
        try:
            client = KubeClient(KubeConfig(server.url, token="admin-token"), user_agent=replay.USER_AGENT)
            tokens = {("auth-errors", 0): "not-a-known-token", ("auth-errors", 1): "viewer-token"}
            results = replay.Replayer(client, tokens=tokens).run_file("auth-errors", replay.load("auth-errors"))
            client.close()
        finally:
            server.shutdown()
    _check(results)


@pytest.mark.parametrize("name", sorted(replay.SETUPS))
def test_separate_fixture(name):
    server = ApiServer(Config(port=0)).start()
    try:
        client = KubeClient(KubeConfig(server.url), user_agent=replay.USER_AGENT)
        replayer = replay.Replayer(client)
        replayer.prepare(name)
        results = replayer.run_file(name, replay.load(name))
        client.close()
    finally:
        server.shutdown()
    _check(results)
