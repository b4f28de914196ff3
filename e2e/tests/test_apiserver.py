"""HTTP behaviour of the test API server: the Kubernetes semantics the operator relies on."""

import json
import threading

import pytest

from e2e.client import ApiException, KubeClient
from e2e.tests.conftest import WIDGET_CRD, WIDGETS, widget

PODS = "/api/v1/namespaces/%s/pods"


def pod(name, node=None, labels=None, owner=None, finalizers=None):
    meta = {"name": name, "labels": labels or {"app": "w"}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                    "controller": True, "blockOwnerDeletion": True}]
    if finalizers:
        meta["finalizers"] = finalizers
    spec = {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["/bin/sleep", "60"]}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def status_of(excinfo):
    return excinfo.value.status, excinfo.value.body


# --------------------------------------------------------------------------------------------- CRUD


def test_create_get_and_errors(kube, ns):
    created = kube.create(WIDGETS % ns, widget("a", ns, replicas=2))
    meta = created["metadata"]
    assert meta["generation"] == 1 and meta["uid"] and meta["resourceVersion"] and meta["creationTimestamp"]
    assert created["spec"] == {"image": "sluice/worker:dev", "replicas": 2, "minReplicas": 0, "maxReplicas": 10,
                               "policy": "Hybrid", "workersToDelete": []}
    assert kube.get(WIDGETS % ns + "/a")["metadata"]["uid"] == meta["uid"]
    with pytest.raises(ApiException) as exc:
        kube.get(WIDGETS % ns + "/missing")
    assert status_of(exc)[0] == 404
    assert exc.value.body["message"] == 'widgets.test.sluice.dev "missing" not found'
    with pytest.raises(ApiException) as exc:
        kube.create(WIDGETS % ns, widget("a", ns))
    assert exc.value.status == 409 and exc.value.reason == "AlreadyExists"


def test_generate_name_and_namespace_checks(kube, ns):
    body = widget("", ns)
    body["metadata"] = {"generateName": "gen-"}
    created = kube.create(WIDGETS % ns, body)
    assert created["metadata"]["name"].startswith("gen-") and len(created["metadata"]["name"]) == 9
    with pytest.raises(ApiException) as exc:
        kube.create(WIDGETS % "nope", widget("x", "nope"))
    assert exc.value.status == 404 and exc.value.body["message"] == 'namespaces "nope" not found'
    with pytest.raises(ApiException) as exc:
        kube.create(WIDGETS % ns, widget("x", "other"))
    assert exc.value.status == 400


def test_update_conflict_and_generation(kube, ns):
    first = kube.create(WIDGETS % ns, widget("a", ns))
    first["spec"]["replicas"] = 3
    second = kube.replace(WIDGETS % ns + "/a", first)
    assert second["metadata"]["generation"] == 2
    first["spec"]["replicas"] = 4
    with pytest.raises(ApiException) as exc:
        kube.replace(WIDGETS % ns + "/a", first)  # stale resourceVersion
    assert exc.value.status == 409 and exc.value.reason == "Conflict"
    labelled = kube.merge_patch(WIDGETS % ns + "/a", {"metadata": {"labels": {"x": "y"}}})
    assert labelled["metadata"]["generation"] == 2, "metadata changes do not bump generation"
    no_rv = dict(second)
    no_rv["metadata"] = {k: v for k, v in second["metadata"].items() if k != "resourceVersion"}
    with pytest.raises(ApiException) as exc:
        kube.replace(WIDGETS % ns + "/a", no_rv)
    assert exc.value.status == 422, "custom resources need a resourceVersion on update"


def test_noop_update_keeps_resource_version(kube, ns):
    created = kube.create(WIDGETS % ns, widget("a", ns))
    again = kube.merge_patch(WIDGETS % ns + "/a", {"spec": {"replicas": 1}})
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_json_patch_test_failure_is_422(kube, ns):
    kube.create(WIDGETS % ns, widget("a", ns))
    with pytest.raises(ApiException) as exc:
        kube.json_patch(WIDGETS % ns + "/a", [{"op": "test", "path": "/spec/replicas", "value": 9},
                                              {"op": "replace", "path": "/spec/replicas", "value": 2}])
    assert exc.value.status == 422 and exc.value.body["details"] == {}
    patched = kube.json_patch(WIDGETS % ns + "/a", [{"op": "replace", "path": "/spec/replicas", "value": 2}])
    assert patched["spec"]["replicas"] == 2


def test_json_patch_guard_on_missing_finalizers_is_null(kube, ns):
    # kube::AddFinalizer's guard for an object without finalizers; a real API server accepts it.
    kube.create(WIDGETS % ns, widget("a", ns))
    patched = kube.json_patch(WIDGETS % ns + "/a", [
        {"op": "test", "path": "/metadata/finalizers", "value": None},
        {"op": "add", "path": "/metadata/finalizers", "value": ["sluice.dev/drain"]}])
    assert patched["metadata"]["finalizers"] == ["sluice.dev/drain"]
    with pytest.raises(ApiException) as exc:  # now the list exists: the same guard fails
        kube.json_patch(WIDGETS % ns + "/a", [
            {"op": "test", "path": "/metadata/finalizers", "value": None},
            {"op": "add", "path": "/metadata/finalizers", "value": ["other"]}])
    assert exc.value.status == 422


def test_strategic_merge_patch_merges_containers_by_name(kube, ns):
    body = pod("p")
    body["spec"]["containers"].append({"name": "side", "image": "busybox:1.36"})
    kube.create(PODS % ns, body)
    patched = kube.call("PATCH", PODS % ns + "/p",
                        {"spec": {"containers": [{"name": "side", "image": "busybox:1.37"}]}},
                        "application/strategic-merge-patch+json")
    images = {c["name"]: c["image"] for c in patched["spec"]["containers"]}
    assert images == {"main": "busybox:1.36", "side": "busybox:1.37"}
    with pytest.raises(ApiException) as exc:
        kube.call("PATCH", WIDGETS % ns + "/x", {"spec": {}}, "application/strategic-merge-patch+json")
    assert exc.value.status == 415, "like a real server: no strategic merge patch for custom resources"


def test_pod_spec_is_immutable_except_image(kube, ns):
    kube.create(PODS % ns, pod("p"))
    with pytest.raises(ApiException) as exc:
        kube.merge_patch(PODS % ns + "/p", {"spec": {"restartPolicy": "Never"}})
    assert exc.value.status == 422 and exc.value.body["details"]["causes"][0]["field"] == "spec"


# --------------------------------------------------------------------------------------- validation


def test_cel_and_schema_errors(kube, ns):
    with pytest.raises(ApiException) as exc:
        kube.create(WIDGETS % ns, widget("bad", ns, replicas=20, maxReplicas=5))
    causes = exc.value.body["details"]["causes"]
    assert causes == [{"reason": "FieldValueInvalid", "field": "spec",
                       "message": 'Invalid value: "object": replicas must be within [minReplicas, maxReplicas]'}]
    with pytest.raises(ApiException) as exc:
        kube.create(WIDGETS % ns, widget("bad", ns, policy="LocalOnly", remoteSelector={"a": "b"},
                                         workersToDelete=["a", "b", "c", "d"]))
    messages = sorted(c["message"] for c in exc.value.body["details"]["causes"])
    assert messages == ['Invalid value: "object": LocalOnly widgets take no remoteSelector',
                        'Invalid value: "object": failed rule: size(self.workersToDelete) <= 3']
    with pytest.raises(ApiException) as exc:
        kube.create(WIDGETS % ns, widget("bad", ns, policy="Sideways", ratio=2, image="UPPER"))
    fields = {c["field"]: c["reason"] for c in exc.value.body["details"]["causes"]}
    assert fields == {"spec.policy": "FieldValueNotSupported", "spec.ratio": "FieldValueInvalid",
                      "spec.image": "FieldValueInvalid"}
    body = widget("bad", ns)
    del body["spec"]["image"]
    with pytest.raises(ApiException) as exc:
        kube.create(WIDGETS % ns, body)
    assert [c["field"] for c in exc.value.body["details"]["causes"]] == ["spec.image", "<nil>"]
    with pytest.raises(ApiException) as exc:
        kube.create(WIDGETS % ns, widget("bad", ns, workersToDelete=["1", "2", "3", "4", "5", "6"]))
    assert exc.value.body["details"]["causes"][0]["message"] == "Too many: 6: must have at most 5 items"


def test_unknown_fields_are_pruned_with_a_warning_or_rejected_when_strict(kube, ns):
    body = widget("a", ns)
    body["spec"]["bogus"] = 1
    resp = kube.request("POST", WIDGETS % ns, json.dumps(body), "application/json")
    assert resp.status == 201 and "bogus" not in resp.json()["spec"]
    assert 'unknown field \\"spec.bogus\\"' in resp.headers.get("Warning", "")
    body["metadata"]["name"] = "b"
    resp = kube.request("POST", WIDGETS % ns, json.dumps(body), "application/json",
                        {"fieldValidation": "Strict"})
    assert resp.status == 400 and "spec.bogus" in resp.json()["message"]


def test_duplicate_json_fields_warn_or_are_refused_when_strict(kube, ns):
    body = json.dumps(widget("dup", ns, replicas=2))
    body = body.replace('"replicas": 2', '"replicas": 2, "replicas": 3')
    resp = kube.request("POST", WIDGETS % ns, body, "application/json", {"dryRun": "All"})
    assert resp.status == 201 and resp.json()["spec"]["replicas"] == 3
    assert resp.warnings == ['299 - "duplicate field \\"spec.replicas\\""']
    resp = kube.request("POST", WIDGETS % ns, body, "application/json", {"fieldValidation": "Strict"})
    assert resp.status == 400
    assert resp.json()["message"] == ('Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
                                      'duplicate field "spec.replicas"')
    resp = kube.request("POST", WIDGETS % ns, body, "application/json", {"fieldValidation": "Ignore",
                                                                          "dryRun": "All"})
    assert resp.status == 201 and resp.warnings == []


def test_strict_patch_quotes_the_patched_object(kube, ns):
    kube.create(WIDGETS % ns, widget("sp", ns))
    resp = kube.request("PATCH", WIDGETS % ns + "/sp", json.dumps({"spec": {"bogus": 1}}),
                        "application/merge-patch+json", {"fieldValidation": "Strict"})
    assert resp.status == 422
    cause = resp.json()["details"]["causes"][0]
    assert cause["field"] == "patch" and cause["message"].endswith('strict decoding error: unknown field "spec.bogus"')
    assert '\\"bogus\\":1' in cause["message"]
    resp = kube.request("PATCH", WIDGETS % ns + "/sp", json.dumps({"spec": {"bogus": 1}}),
                        "application/merge-patch+json")
    assert resp.status == 200 and resp.warnings == ['299 - "unknown field \\"spec.bogus\\""']


def test_apply_that_cannot_be_typed_is_a_500_as_on_a_real_server(kube, ns):
    path = WIDGETS % ns + "/typed"
    config = widget("typed", ns)
    config["spec"]["bogus"] = 1
    for validation in ("Strict", "Warn", "Ignore"):
        resp = kube.request("PATCH", path, json.dumps(config), "application/apply-patch+yaml",
                            {"fieldManager": "m", "fieldValidation": validation})
        assert resp.status == 500, resp.body
        assert resp.json()["message"] == ("failed to create typed patch object (%s/typed; test.sluice.dev/v1, "
                                          "Kind=Widget): .spec.bogus: field not declared in schema" % ns)
        assert "reason" not in resp.json()
    config["spec"] = {"image": "sluice/worker:dev", "replicas": "two"}
    resp = kube.request("PATCH", path, json.dumps(config), "application/apply-patch+yaml", {"fieldManager": "m"})
    assert resp.status == 500 and "expected numeric (int or float), got string" in resp.json()["message"]
    del config["apiVersion"]
    resp = kube.request("PATCH", path, json.dumps(config), "application/apply-patch+yaml", {"fieldManager": "m"})
    assert resp.status == 400 and resp.json()["message"] == (
        "Incorrect version specified in apply patch. Specified patch version: , expected: test.sluice.dev/v1")
    config.update(apiVersion="autoscaling/v1", kind="Scale", spec={"replicas": 1})
    kube.create(WIDGETS % ns, widget("typed", ns))
    resp = kube.request("PATCH", path + "/scale", json.dumps(config), "application/apply-patch+yaml",
                        {"fieldManager": "m"})
    assert resp.status == 500 and resp.json()["message"].endswith(
        "no corresponding type for autoscaling/v1, Kind=Scale")


def test_integral_floats_are_integers_to_the_schema_but_not_to_cel(kube, ns):
    with pytest.raises(ApiException) as exc:
        kube.create(WIDGETS % ns, widget("float", ns, replicas=2.0))
    causes = {(c["field"], c["message"]) for c in exc.value.body["details"]["causes"]}
    assert causes == {
        (".spec.replicas", "Invalid value: 0: .spec.replicas accessor error: 2 is of the type float64, expected int64"),
        ("spec", 'Invalid value: "object": invalid data, expected int, got float64 evaluating rule: replicas must '
                 'be within [minReplicas, maxReplicas]')}


def test_horizontal_pod_autoscalers_are_stored_defaulted_and_validated(kube, ns):
    path = "/apis/autoscaling/v2/namespaces/%s/horizontalpodautoscalers" % ns
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
           "spec": {"scaleTargetRef": {"apiVersion": "test.sluice.dev/v1", "kind": "Widget", "name": "a"},
                    "maxReplicas": 3, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
                    "status": {"desiredReplicas": 9}}}
    created = kube.create(path, hpa)
    assert created["spec"]["minReplicas"] == 1
    assert created["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    assert created["spec"]["behavior"]["scaleDown"] == {
        "stabilizationWindowSeconds": 60, "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
    assert created["spec"]["behavior"]["scaleUp"]["policies"][0] == {"type": "Pods", "value": 4, "periodSeconds": 15}
    assert created["status"] == {"currentMetrics": None, "desiredReplicas": 0}
    assert "generation" not in created["metadata"]
    created["status"] = {"currentReplicas": 1, "desiredReplicas": 2}
    updated = kube.replace(path + "/h/status", created)
    assert updated["status"] == {"currentMetrics": None, "currentReplicas": 1, "desiredReplicas": 2}
    listed = kube.get(path)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["h"] and "kind" not in listed["items"][0]
    for spec, field in (({"maxReplicas": 3}, "spec.scaleTargetRef.kind"),
                        ({"scaleTargetRef": {"kind": "Widget", "name": "a"}, "maxReplicas": 0}, "spec.maxReplicas"),
                        ({"scaleTargetRef": {"kind": "Widget", "name": "a"}, "maxReplicas": 2, "minReplicas": 0},
                         "spec.minReplicas"),
                        ({"scaleTargetRef": {"kind": "Widget", "name": "a"}, "maxReplicas": 2, "minReplicas": 3},
                         "spec.maxReplicas")):
        with pytest.raises(ApiException) as exc:
            kube.create(path, dict(hpa, metadata={"name": "bad"}, spec=spec))
        assert exc.value.status == 422 and field in [c["field"] for c in exc.value.body["details"]["causes"]]
    with pytest.raises(ApiException) as exc:
        kube.create(path, dict(hpa, metadata={"name": "bad"}, spec={"scaleTargetRef": "a", "maxReplicas": 1}))
    assert exc.value.status == 400 and "HorizontalPodAutoscalerSpec.spec.scaleTargetRef" in exc.value.body["message"]


def test_crd_with_unsupported_cel_is_rejected(kube):
    crd = json.loads(json.dumps(WIDGET_CRD))
    crd["metadata"]["name"] = "gadgets.test.sluice.dev"
    crd["spec"]["names"] = {"plural": "gadgets", "kind": "Gadget"}
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["x-kubernetes-validations"] = [{"rule": "quantity(self.image).isGreaterThan(1)"}]
    with pytest.raises(ApiException) as exc:
        kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert exc.value.status == 422
    assert "compilation failed" in exc.value.body["message"]
    assert "undeclared reference to 'isGreaterThan'" in exc.value.body["message"]
    spec_schema["x-kubernetes-validations"] = [{"rule": "self.replica > 1"}]
    with pytest.raises(ApiException) as exc:
        kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert "undefined field 'replica'" in exc.value.body["message"]


def test_malformed_bodies_are_400(kube, ns):
    resp = kube.request("POST", WIDGETS % ns, b'{"apiVersion": "test.sluice.dev/v1", "kind": ', "application/json")
    assert resp.status == 400 and "unexpected end of JSON input" in resp.json()["message"]
    resp = kube.request("POST", WIDGETS % ns, b"kind: [unclosed", "application/yaml")
    assert resp.status == 400 and resp.json()["reason"] == "BadRequest"
    resp = kube.request("POST", WIDGETS % ns, b"[1, 2]", "application/json")
    assert resp.status == 400
    resp = kube.request("PATCH", WIDGETS % ns + "/a", b"{not json", "application/merge-patch+json")
    assert resp.status in (400, 404)
    kube.create(WIDGETS % ns, widget("a", ns))
    resp = kube.request("PATCH", WIDGETS % ns + "/a", b"{not json", "application/merge-patch+json")
    assert resp.status == 400
    resp = kube.request("PATCH", WIDGETS % ns + "/a", b'{"op": "add"}', "application/json-patch+json")
    assert resp.status == 400
    resp = kube.request("PATCH", WIDGETS % ns + "/a", b"spec: [", "application/apply-patch+yaml",
                        {"fieldManager": "m"})
    assert resp.status == 400
    resp = kube.request("PATCH", WIDGETS % ns + "/a", b"{}", "text/plain")
    assert resp.status == 415
    resp = kube.request("GET", PODS % ns, query={"labelSelector": "a in (b"})
    assert resp.status == 400
    resp = kube.request("GET", PODS % ns, query={"fieldSelector": "spec.bogus=1"})
    assert resp.status == 400 and resp.json()["message"] == "field label not supported: spec.bogus"
    resp = kube.request("GET", WIDGETS % ns, query={"limit": "-1"})
    assert resp.status == 400
    resp = kube.request("GET", WIDGETS % ns, query={"continue": "garbage!"})
    assert resp.status == 400


def test_unknown_resources_are_404(kube):
    for path in ("/api/v1/namespaces/default/nonsense", "/apis/nope.example/v1/things", "/apis/apps/v9/deployments",
                 "/not/an/api", "/api/v1/namespaces/default/pods/p/bogus-sub"):
        resp = kube.request("GET", path)
        assert resp.status == 404, path
        assert resp.json()["reason"] == "NotFound"


# ----------------------------------------------------------------------------- lists and selectors


def test_pagination_with_continue(kube, ns):
    for i in range(7):
        kube.create(WIDGETS % ns, widget("w%d" % i, ns))
    seen, token, pages = [], None, 0
    while True:
        query = {"limit": "3"}
        if token:
            query["continue"] = token
        page = kube.get(WIDGETS % ns, query)
        pages += 1
        seen += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
        assert page["metadata"]["remainingItemCount"] == 7 - len(seen)
    assert pages == 3 and seen == ["w%d" % i for i in range(7)]
    everything = kube.get(WIDGETS % ns, {"limit": "2", "resourceVersion": "0"})
    assert len(everything["items"]) == 7, "resourceVersion=0 is served from the cache without paging"


def test_continue_sees_a_consistent_snapshot(kube, ns):
    for i in range(4):
        kube.create(WIDGETS % ns, widget("w%d" % i, ns))
    first = kube.get(WIDGETS % ns, {"limit": "2"})
    kube.delete(WIDGETS % ns + "/w3")
    kube.create(WIDGETS % ns, widget("w4", ns))
    rest = kube.get(WIDGETS % ns, {"limit": "10", "continue": first["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in rest["items"]] == ["w2", "w3"]
    assert rest["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_label_and_field_selectors(kube, ns):
    kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": ns + "-node"}})
    kube.create(PODS % ns, pod("a", labels={"app": "w", "tier": "1"}))
    kube.create(PODS % ns, pod("b", labels={"app": "w", "tier": "2"}, node=ns + "-node"))
    kube.create(PODS % ns, pod("c", labels={"app": "d"}))

    def names(**query):
        return sorted(i["metadata"]["name"] for i in kube.get(PODS % ns, query)["items"])

    assert names(labelSelector="app=w") == ["a", "b"]
    assert names(labelSelector="app!=w") == ["c"]
    assert names(labelSelector="tier in (2,3)") == ["b"]
    assert names(labelSelector="tier notin (2)") == ["a", "c"]
    assert names(labelSelector="tier") == ["a", "b"]
    assert names(labelSelector="!tier") == ["c"]
    assert names(labelSelector="app=w,tier=1") == ["a"]
    assert names(fieldSelector="spec.nodeName=%s-node" % ns) == ["b"]
    assert names(fieldSelector="spec.nodeName=") == ["a", "c"]
    assert names(fieldSelector="metadata.name!=a,status.phase=Pending") == ["b", "c"]
    every_ns = kube.get("/api/v1/pods", {"fieldSelector": "metadata.namespace=%s" % ns})["items"]
    assert len(every_ns) == 3 and "kind" not in every_ns[0], "built-in list items carry no kind"


# ------------------------------------------------------------------------------------------- watch


def _collect(kube, path, query, count, timeout=10):
    events = []
    for event in kube.watch(path, query, timeout=timeout):
        events.append(event)
        if len(events) >= count:
            break
    return events


def test_watch_from_resource_version_with_selectors(kube, ns, server):
    start = kube.get(WIDGETS % ns)["metadata"]["resourceVersion"]
    kube.create(WIDGETS % ns, widget("a", ns))
    kube.create(WIDGETS % ns, widget("b", ns))
    kube.merge_patch(WIDGETS % ns + "/a", {"metadata": {"labels": {"pick": "me"}}})
    kube.merge_patch(WIDGETS % ns + "/a", {"metadata": {"labels": {"pick": "no"}}})
    kube.delete(WIDGETS % ns + "/b")
    all_events = _collect(kube, WIDGETS % ns, {"resourceVersion": start, "timeoutSeconds": "5"}, 5)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in all_events] == [
        ("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "a"), ("DELETED", "b")]
    selected = _collect(kube, WIDGETS % ns, {"resourceVersion": start, "timeoutSeconds": "5",
                                             "labelSelector": "pick=me"}, 2)
    assert [e["type"] for e in selected] == ["ADDED", "DELETED"], "objects leaving a selector are DELETED"


def test_watch_without_resource_version_starts_with_state(kube, ns):
    kube.create(WIDGETS % ns, widget("a", ns))
    events = _collect(kube, WIDGETS % ns, {"timeoutSeconds": "5"}, 1)
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "a"


def test_watch_bookmarks_and_timeout(kube, ns, server):
    server.bookmark_interval = 0.2
    try:
        rv = kube.get(WIDGETS % ns)["metadata"]["resourceVersion"]
        events = list(kube.watch(WIDGETS % ns, {"resourceVersion": rv, "allowWatchBookmarks": "true",
                                                "timeoutSeconds": "1"}))
    finally:
        server.bookmark_interval = 60.0
    assert events and all(e["type"] == "BOOKMARK" for e in events)
    assert events[0]["object"] == {"kind": "Widget", "apiVersion": "test.sluice.dev/v1",
                                   "metadata": {"resourceVersion": events[0]["object"]["metadata"]["resourceVersion"]}}


def test_watch_from_compacted_version_gets_410_event(kube, ns):
    kube.create(WIDGETS % ns, widget("a", ns))
    old = kube.get(WIDGETS % ns)["metadata"]["resourceVersion"]
    kube.merge_patch(WIDGETS % ns + "/a", {"spec": {"replicas": 2}})
    kube.call("POST", "/_admin/compact", {})
    conn, resp = kube.stream(WIDGETS % ns, {"watch": "true", "resourceVersion": old})
    assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
    events = [json.loads(line) for line in resp.read().splitlines()]
    conn.close()
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["code"] == 410 and status["reason"] == "Expired"
    assert status["message"].startswith("too old resource version: %s (" % old)
    resp = kube.request("GET", WIDGETS % ns, query={"resourceVersion": old, "resourceVersionMatch": "Exact"})
    assert resp.status == 410 and resp.json()["reason"] == "Expired"
    assert kube.get(WIDGETS % ns, {"resourceVersion": old, "resourceVersionMatch": "NotOlderThan"})["items"]


def test_history_is_bounded(kube, ns, server):
    first = kube.create(WIDGETS % ns, widget("a", ns))["metadata"]["resourceVersion"]
    for i in range(server.registry.store.history_size + 5):
        kube.merge_patch(WIDGETS % ns + "/a", {"metadata": {"labels": {"n": str(i)}}})
    events = list(kube.watch(WIDGETS % ns, {"resourceVersion": first, "timeoutSeconds": "2"}))
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410


def test_dropped_watch_ends_stream(kube, ns):
    done = threading.Event()
    events = []

    def run():
        for event in kube.watch(WIDGETS % ns, {"timeoutSeconds": "30"}):
            events.append(event)
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    admin = KubeClient(kube.config)
    import time
    deadline = time.monotonic() + 10
    while not any(ns in w["path"] for w in admin.get("/_admin/watches")["watches"]):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert admin.call("POST", "/_admin/watches/close", {"pathRegex": "/namespaces/%s/" % ns})["closed"] == 1
    assert done.wait(10)
    admin.close()


# --------------------------------------------------------------------------------------- apply


def test_server_side_apply_conflicts_and_force(kube, ns):
    path = WIDGETS % ns + "/a"
    created = kube.apply(path, widget("a", ns, replicas=2), "operator")
    assert created["metadata"]["managedFields"][0]["fieldsV1"] == {"f:spec": {"f:image": {}, "f:replicas": {}}}
    with pytest.raises(ApiException) as exc:
        kube.apply(path, {"apiVersion": "test.sluice.dev/v1", "kind": "Widget", "metadata": {"name": "a"},
                          "spec": {"replicas": 5}}, "autoscaler")
    assert exc.value.status == 409
    assert exc.value.body["details"]["causes"] == [{"reason": "FieldManagerConflict", "field": ".spec.replicas",
                                                    "message": 'conflict with "operator"'}]
    same = kube.apply(path, {"apiVersion": "test.sluice.dev/v1", "kind": "Widget", "metadata": {"name": "a"},
                             "spec": {"replicas": 2}}, "autoscaler")
    assert same["spec"]["replicas"] == 2, "applying the same value shares ownership without conflict"
    forced = kube.apply(path, {"apiVersion": "test.sluice.dev/v1", "kind": "Widget", "metadata": {"name": "a"},
                               "spec": {"replicas": 5}}, "autoscaler", force=True)
    owners = {e["manager"]: e["fieldsV1"] for e in forced["metadata"]["managedFields"]}
    assert owners == {"operator": {"f:spec": {"f:image": {}}}, "autoscaler": {"f:spec": {"f:replicas": {}}}}
    # The operator drops replicas from its configuration: it keeps the autoscaler's value.
    again = kube.apply(path, {"apiVersion": "test.sluice.dev/v1", "kind": "Widget", "metadata": {"name": "a"},
                              "spec": {"image": "sluice/worker:v2"}}, "operator")
    assert again["spec"]["replicas"] == 5 and again["spec"]["image"] == "sluice/worker:v2"
    with pytest.raises(ApiException) as exc:
        kube.call("PATCH", path, "{}", "application/apply-patch+yaml")
    assert exc.value.status == 422 and exc.value.body["details"]["kind"] == "PatchOptions"


def test_apply_removes_fields_the_manager_stopped_applying(kube, ns):
    path = WIDGETS % ns + "/a"
    kube.apply(path, widget("a", ns, ratio=0.5, remoteSelector={"zone": "x"}), "op")
    updated = kube.apply(path, widget("a", ns), "op")
    assert "ratio" not in updated["spec"] and "remoteSelector" not in updated["spec"]


def test_apply_to_pods_merges_containers_by_name(kube, ns):
    path = PODS % ns + "/p"
    body = pod("p")
    kube.apply(path, body, "one")
    second = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"extra": "1"}}}
    result = kube.apply(path, second, "two")
    assert result["metadata"]["labels"] == {"app": "w", "extra": "1"}
    assert [c["name"] for c in result["spec"]["containers"]] == ["main"]


# ------------------------------------------------------------------------------- status and scale


def test_status_subresource(kube, ns):
    kube.create(WIDGETS % ns, widget("a", ns))
    status = kube.merge_patch(WIDGETS % ns + "/a/status", {"status": {"replicas": 3, "selector": "app=a"},
                                                           "spec": {"replicas": 7}})
    assert status["status"]["replicas"] == 3 and status["spec"]["replicas"] == 1
    assert status["metadata"]["generation"] == 1
    main = kube.merge_patch(WIDGETS % ns + "/a", {"status": {"replicas": 99}})
    assert main["status"]["replicas"] == 3, "status is ignored on the main resource"
    with pytest.raises(ApiException) as exc:
        kube.merge_patch(WIDGETS % ns + "/a/status",
                         {"status": {"conditions": [{"type": "Ready"}]}})
    assert exc.value.status == 422


def test_scale_subresource(kube, ns):
    kube.create(WIDGETS % ns, widget("a", ns, replicas=2))
    kube.merge_patch(WIDGETS % ns + "/a/status", {"status": {"replicas": 2, "selector": "app=a"}})
    scale = kube.get(WIDGETS % ns + "/a/scale")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2} and scale["status"] == {"replicas": 2, "selector": "app=a"}
    scale["spec"]["replicas"] = 4
    assert kube.replace(WIDGETS % ns + "/a/scale", scale)["spec"]["replicas"] == 4
    with pytest.raises(ApiException) as exc:
        kube.replace(WIDGETS % ns + "/a/scale", scale)  # stale resourceVersion
    assert exc.value.status == 409
    assert kube.merge_patch(WIDGETS % ns + "/a/scale", {"spec": {"replicas": 6}})["spec"]["replicas"] == 6
    obj = kube.get(WIDGETS % ns + "/a")
    assert obj["spec"]["replicas"] == 6 and obj["metadata"]["generation"] == 3
    with pytest.raises(ApiException) as exc:
        kube.merge_patch(WIDGETS % ns + "/a/scale", {"spec": {"replicas": 50}})
    assert exc.value.status == 422, "CEL rules still apply to scale writes"
    with pytest.raises(ApiException) as exc:
        kube.merge_patch(WIDGETS % ns + "/a/scale", {"spec": {"replicas": -1}})
    assert exc.value.status == 422


# -------------------------------------------------------------------------------- deletion and GC


def test_finalizers_keep_object_until_removed(kube, ns):
    body = widget("a", ns)
    body["metadata"]["finalizers"] = ["sluice.dev/cleanup"]
    kube.create(WIDGETS % ns, body)
    deleted = kube.delete(WIDGETS % ns + "/a")
    assert deleted["metadata"]["deletionTimestamp"] and deleted["metadata"]["generation"] == 2
    assert kube.get(WIDGETS % ns + "/a")["metadata"]["finalizers"] == ["sluice.dev/cleanup"]
    kube.json_patch(WIDGETS % ns + "/a", [{"op": "remove", "path": "/metadata/finalizers/0"}])
    with pytest.raises(ApiException) as exc:
        kube.get(WIDGETS % ns + "/a")
    assert exc.value.status == 404


def test_owner_deletion_garbage_collects_dependents(kube, ns):
    owner = kube.create(WIDGETS % ns, widget("a", ns))
    node = ns + "-gc-node"
    kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    kube.create(PODS % ns, pod("unbound", owner=owner))
    kube.create(PODS % ns, pod("bound", owner=owner, node=node))
    kube.create(PODS % ns, pod("held", owner=owner, finalizers=["test/hold"]))
    kube.create("/api/v1/namespaces/%s/configmaps" % ns,
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "cm", "ownerReferences": pod("x", owner=owner)["metadata"]["ownerReferences"]},
                 "data": {"k": "v"}})
    result = kube.delete(WIDGETS % ns + "/a", body={"propagationPolicy": "Background"})
    assert result["kind"] == "Status" and result["status"] == "Success"
    left = {p["metadata"]["name"]: p["metadata"] for p in kube.get(PODS % ns)["items"]}
    assert sorted(left) == ["bound", "held"]
    assert left["bound"]["deletionGracePeriodSeconds"] == 30, "bound pods wait for their node"
    assert left["held"]["deletionTimestamp"]
    assert kube.get("/api/v1/namespaces/%s/configmaps" % ns)["items"] == []
    confirmed = kube.delete(PODS % ns + "/bound", {"gracePeriodSeconds": "0"})
    assert confirmed["kind"] == "Pod"
    assert [p["metadata"]["name"] for p in kube.get(PODS % ns)["items"]] == ["held"]


def test_foreground_and_orphan_propagation(kube, ns):
    owner = kube.create(WIDGETS % ns, widget("fg", ns))
    kube.create(PODS % ns, pod("child", owner=owner, finalizers=["test/hold"]))
    kube.delete(WIDGETS % ns + "/fg", body={"propagationPolicy": "Foreground"})
    waiting = kube.get(WIDGETS % ns + "/fg")
    assert "foregroundDeletion" in waiting["metadata"]["finalizers"], "owner waits for its dependents"
    kube.json_patch(PODS % ns + "/child", [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(ApiException):
        kube.get(WIDGETS % ns + "/fg")
    owner = kube.create(WIDGETS % ns, widget("or", ns))
    kube.create(PODS % ns, pod("orphan", owner=owner))
    kube.delete(WIDGETS % ns + "/or", body={"propagationPolicy": "Orphan"})
    assert "ownerReferences" not in kube.get(PODS % ns + "/orphan")["metadata"]


def test_unbound_pods_go_at_once_and_bound_pods_wait(kube, ns):
    kube.create(PODS % ns, pod("free"))
    gone = kube.delete(PODS % ns + "/free")
    assert gone["kind"] == "Pod"
    with pytest.raises(ApiException):
        kube.get(PODS % ns + "/free")
    kube.create(PODS % ns, pod("busy", node="somewhere"))
    terminating = kube.delete(PODS % ns + "/busy", {"gracePeriodSeconds": "5"})
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 5
    kube.delete(PODS % ns + "/busy", {"gracePeriodSeconds": "0"})
    with pytest.raises(ApiException):
        kube.get(PODS % ns + "/busy")


def test_namespace_deletion_removes_contents(kube, ns):
    kube.create(WIDGETS % ns, widget("a", ns))
    kube.create(PODS % ns, pod("p"))
    kube.delete("/api/v1/namespaces/" + ns)
    with pytest.raises(ApiException) as exc:
        kube.get("/api/v1/namespaces/" + ns)
    assert exc.value.status == 404
    assert kube.get("/api/v1/pods", {"fieldSelector": "metadata.namespace=" + ns})["items"] == []
    with pytest.raises(ApiException) as exc:
        kube.delete("/api/v1/namespaces/default")
    assert exc.value.status == 403


def test_binding_and_node_taint_lifecycle(kube, ns):
    node = kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": ns + "-n"},
                                         "status": {"allocatable": {"cpu": "4"}}})
    assert node["spec"]["taints"] == [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    ready = kube.merge_patch("/api/v1/nodes/%s-n/status" % ns,
                             {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert "taints" not in ready["spec"]
    kube.create(PODS % ns, pod("p"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": ns + "-n"}}
    assert kube.create(PODS % ns + "/p/binding", binding) == {"kind": "Status", "apiVersion": "v1",
                                                            "metadata": {}, "status": "Success", "code": 201}
    bound = kube.get(PODS % ns + "/p")
    assert bound["spec"]["nodeName"] == ns + "-n"
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
    with pytest.raises(ApiException) as exc:
        kube.create(PODS % ns + "/p/binding", binding)
    assert exc.value.status == 409


def test_pod_defaults_and_invalid_quantity(kube, ns):
    created = kube.create(PODS % ns, pod("p"))
    container = created["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "IfNotPresent" and created["status"]["phase"] == "Pending"
    assert created["status"]["qosClass"] == "BestEffort"
    assert created["spec"]["terminationGracePeriodSeconds"] == 30
    bad = pod("q")
    bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "two"}}
    with pytest.raises(ApiException) as exc:
        kube.create(PODS % ns, bad)
    assert exc.value.status == 400 and "quantities must match" in exc.value.body["message"]


def test_events_both_apis(kube, ns):
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1", "namespace": ns},
             "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "Scaled", "note": "hello", "type": "Normal",
             "action": "Scale", "reportingController": "sluice.dev/operator", "reportingInstance": "op-0",
             "regarding": {"kind": "Widget", "name": "a", "namespace": ns}}
    kube.create("/apis/events.k8s.io/v1/namespaces/%s/events" % ns, event)
    core = kube.get("/api/v1/namespaces/%s/events/e1" % ns)
    assert core["message"] == "hello" and core["involvedObject"]["name"] == "a"
    assert core["reportingComponent"] == "sluice.dev/operator"
    del event["eventTime"]
    event["metadata"]["name"] = "e2"
    with pytest.raises(ApiException) as exc:
        kube.create("/apis/events.k8s.io/v1/namespaces/%s/events" % ns, event)
    assert exc.value.body["message"] == 'Event "e2" is invalid: eventTime: Required value'
    legacy = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e3"}, "message": "old style",
              "reason": "X", "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns}, "type": "Warning"}
    kube.create("/api/v1/namespaces/%s/events" % ns, legacy)
    new_view = kube.get("/apis/events.k8s.io/v1/namespaces/%s/events/e3" % ns)
    assert new_view["note"] == "old style" and new_view["regarding"]["name"] == "p"


def test_lease_takeover_conflict(kube, ns):
    path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % ns
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"},
             "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    created = kube.create(path, lease)
    renewed = dict(created, spec=dict(created["spec"], renewTime="2026-01-01T00:00:01.000000Z"))
    kube.replace(path + "/leader", renewed)
    stolen = dict(created, spec=dict(created["spec"], holderIdentity="b"))
    with pytest.raises(ApiException) as exc:
        kube.replace(path + "/leader", stolen)
    assert exc.value.status == 409


# ---------------------------------------------------------------------------------- admin controls


def test_fault_injection_and_stats(kube, ns):
    kube.call("POST", "/_admin/stats/reset")
    kube.call("POST", "/_admin/faults", {"method": "POST", "pathRegex": "/widgets$", "status": 429,
                                         "retryAfter": 2, "count": 1})
    resp = kube.request("POST", WIDGETS % ns, json.dumps(widget("a", ns)))
    assert resp.status == 429 and resp.headers["Retry-After"] == "2"
    assert resp.json()["details"]["retryAfterSeconds"] == 2
    assert kube.create(WIDGETS % ns, widget("a", ns))["metadata"]["name"] == "a", "the fault fired once"
    kube.call("POST", "/_admin/faults", {"verb": "update", "status": 409, "count": 2})
    for _ in range(2):
        assert kube.request("PUT", WIDGETS % ns + "/a", json.dumps(kube.get(WIDGETS % ns + "/a"))).status == 409
    kube.call("POST", "/_admin/faults", {"pathRegex": "/widgets/a$", "status": 500, "count": 0})
    assert kube.request("GET", WIDGETS % ns + "/a").status == 500
    assert kube.request("GET", WIDGETS % ns + "/a").status == 500, "count 0 never runs out"
    assert len(kube.get("/_admin/faults")["faults"]) == 1
    kube.call("DELETE", "/_admin/faults")
    assert kube.request("GET", WIDGETS % ns + "/a").status == 200
    stats = kube.get("/_admin/stats")
    assert stats["verbs"]["create"] == 2 and stats["verbs"]["update"] == 2 and stats["verbs"]["get"] == 5
    assert stats["byResource"]["create widgets"] == 2
    assert stats["writes"] == 4 and stats["codes"]["429"] == 1
    assert stats["byClient"]["e2e-tests"]["writes"] == 4 and stats["byClient"]["e2e-tests"]["verbs"]["get"] == 5
    assert stats["byClient"]["e2e-tests"]["byResource"]["create widgets"] == 2
    assert stats["byClient"]["e2e-tests"]["failed"] == stats["requests"] - stats["codes"].get("200", 0) - \
        stats["codes"].get("201", 0)
    resp = kube.request("POST", "/_admin/faults", json.dumps({"status": 99}))
    assert resp.status == 400


def test_dropped_connection_fault(kube, ns):
    # Two drops: the client retries a dropped keep-alive connection once.
    kube.call("POST", "/_admin/faults", {"pathRegex": "/widgets$", "method": "GET", "dropConnection": True,
                                         "count": 2})
    other = KubeClient(kube.config)
    with pytest.raises(Exception):
        other.request("GET", WIDGETS % ns)
    assert other.request("GET", WIDGETS % ns).status == 200
    other.close()


def test_discovery(kube):
    group = kube.get("/apis/test.sluice.dev/v1")
    names = [r["name"] for r in group["resources"]]
    assert names == ["widgets", "widgets/status", "widgets/scale"]
    apis = [g["name"] for g in kube.get("/apis")["groups"]]
    assert "test.sluice.dev" in apis and "coordination.k8s.io" in apis
    core = {r["name"] for r in kube.get("/api/v1")["resources"]}
    assert {"pods", "pods/status", "pods/binding", "nodes", "events", "configmaps", "secrets"} <= core
    crd = kube.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.test.sluice.dev")
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]} == {"NamesAccepted": "True",
                                                                           "Established": "True"}


MALFORMED_BODIES = [
    [], "text", 5, None, {"metadata": 5}, {"metadata": {"name": 5}}, {"metadata": {"name": "x", "labels": []}},
    {"metadata": {"name": "x", "labels": {"a": 1}}}, {"metadata": {"generateName": 7}},
    {"metadata": {"name": "x", "finalizers": "f"}}, {"metadata": {"name": "x", "ownerReferences": {}}},
    {"metadata": {"name": "x", "ownerReferences": [5]}}, {"metadata": {"name": "x", "annotations": {"a": []}}},
    {"metadata": {"name": "x"}, "spec": "nonsense"}, {"metadata": {"name": "x"}, "spec": []},
    {"metadata": {"name": "x"}, "spec": {"containers": "c"}}, {"metadata": {"name": "x"}, "spec": {"containers": [5]}},
    {"metadata": {"name": "x"}, "spec": {"ports": [{"port": "a"}]}}, {"metadata": {"name": "x"}, "status": 3},
    {"metadata": {"name": "x"}, "data": [1]}, {"metadata": {"name": "x"}, "spec": {"image": 5, "replicas": "2"}},
    {"metadata": {"name": "x", "managedFields": "m"}},
    {"metadata": {"name": "x", "managedFields": [{"operation": "Bogus"}]}},
]


@pytest.mark.parametrize("collection", [
    "/api/v1/namespaces/%s/pods", "/api/v1/namespaces/%s/services", "/api/v1/nodes",
    "/api/v1/namespaces/%s/configmaps", "/api/v1/namespaces/%s/secrets",
    "/api/v1/namespaces/%s/persistentvolumeclaims", "/api/v1/namespaces/%s/events",
    "/apis/events.k8s.io/v1/namespaces/%s/events", "/apis/coordination.k8s.io/v1/namespaces/%s/leases",
    "/apis/apps/v1/namespaces/%s/deployments", WIDGETS, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/apis/autoscaling/v2/namespaces/%s/horizontalpodautoscalers", "/api/v1/namespaces"])
def test_malformed_objects_never_cause_server_errors(kube, ns, collection):
    path = collection % ns if "%s" in collection else collection
    for body in MALFORMED_BODIES:
        for method, target, ctype in (("POST", path, "application/json"),
                                      ("PUT", path + "/x", "application/json"),
                                      ("PATCH", path + "/x", "application/merge-patch+json"),
                                      ("PATCH", path + "/x", "application/apply-patch+yaml")):
            resp = kube.request(method, target, json.dumps(body), ctype, {"fieldManager": "fuzz"})
            assert 400 <= resp.status < 500 or resp.status in (200, 201), (method, target, body, resp.body[:300])
            assert resp.json()["kind"] != "Status" or resp.json()["code"] < 500


_CRD_PARTS = ["spec.versions.0.subresources", "spec.versions.0.subresources.scale",
               "spec.versions.0.subresources.scale.specReplicasPath",
               "spec.versions.0.subresources.scale.labelSelectorPath", "spec.versions.0.additionalPrinterColumns",
               "spec.versions.0.name", "spec.versions.0.schema", "spec.versions.0.storage", "spec.conversion",
               "spec.versions.0.schema.openAPIV3Schema.properties.spec.x-kubernetes-validations",
               "spec.versions.0.schema.openAPIV3Schema.properties.spec.x-kubernetes-validations.0",
               "spec.versions.0.schema.openAPIV3Schema.properties.spec.x-kubernetes-validations.0.rule",
               "spec.versions.0.schema.openAPIV3Schema.properties.spec.properties.replicas.default",
               "spec.versions.0.schema.openAPIV3Schema.properties.status.properties.conditions.items.required",
               "spec.versions.0.schema.openAPIV3Schema.properties.status.properties.conditions."
               "x-kubernetes-list-map-keys"]


@pytest.mark.parametrize("part", _CRD_PARTS)
def test_malformed_crd_parts_never_cause_server_errors(kube, part):
    for value in (5, "x", [], {}, None, [5], {"a": 5}, True, -1, 2.5):
        crd = json.loads(json.dumps(WIDGET_CRD))
        target = crd
        steps = part.split(".")
        for step in steps[:-1]:
            target = target[int(step)] if isinstance(target, list) else target[step]
        target[int(steps[-1]) if isinstance(target, list) else steps[-1]] = value
        for validation in ("Warn", "Strict"):
            resp = kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json.dumps(crd),
                                "application/json", {"dryRun": "All", "fieldValidation": validation})
            assert resp.status < 500, (part, value, resp.body[:300])


@pytest.mark.parametrize("schema", [
    5, [], {"type": 7}, {"type": "object", "properties": []}, {"type": "object", "properties": {"a": 5}},
    {"type": "object", "required": "a"}, {"type": "object", "properties": {"a": {"type": "array", "items": 3}}},
    {"type": "object", "x-kubernetes-validations": "self.a"}, {"type": "object", "x-kubernetes-validations": [5]},
    {"type": "object", "x-kubernetes-validations": [{"rule": 5}]}, {"type": "object", "additionalProperties": 3},
    {"type": "object", "properties": {"a": {"type": "string", "enum": "x"}}},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": "0"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": 5}}},
])
def test_malformed_crd_schemas_are_rejected(kube, schema):
    crd = json.loads(json.dumps(WIDGET_CRD))
    crd["metadata"]["name"] = "things.bad.sluice.dev"
    crd["spec"]["group"] = "bad.sluice.dev"
    crd["spec"]["names"] = {"plural": "things", "kind": "Thing"}
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema
    resp = kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json.dumps(crd))
    assert resp.status in (400, 422), resp.body[:400]
