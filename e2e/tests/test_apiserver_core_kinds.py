"""What the test API server refuses of core/v1 Services and pods, as a real API server does (Kubernetes v1.26
pkg/apis/core/validation), and the order of keyed list items after a server-side apply (structured-merge-diff).

None of these refusals is in the recordings (testing/kube-fixtures); the messages follow Kubernetes' source. The
recorded Service and pods (pods-ownership.json) still pass, which the conformance replay checks.
"""

import pytest

from e2e.client import ApiException

SERVICES = "/api/v1/namespaces/%s/services"
PODS = "/api/v1/namespaces/%s/pods"


def service(name, ports, **spec):
    body = {"type": "ClusterIP", "selector": {"sluice.dev/dataservice": "ds", "sluice.dev/role": "dispatcher"},
            "ports": ports}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": body}


def port(name, number, target=None):
    return {"name": name, "port": number, "targetPort": number if target is None else target, "protocol": "TCP"}


def refused(call):
    with pytest.raises(ApiException) as exc:
        call()
    assert exc.value.status == 422, exc.value.body
    body = exc.value.body
    assert body["reason"] == "Invalid"
    return body["message"], [(c["field"], c["message"]) for c in body["details"]["causes"]]


def test_post_then_apply_by_the_same_manager_adds_a_port_and_is_refused_as_a_duplicate_name(kube, ns):
    """Issue 9 §3, as a real server answers it: the POST's fields belong to an Update entry, the apply is another
    owner, so the old port stays, the new one is placed before the shared item, and the names clash."""
    kube.create(SERVICES % ns, service("ds-dispatcher", [port("grpc", 5050), port("metrics", 8090)]),
                {"fieldManager": "sluice-operator"})
    changed = service("ds-dispatcher", [port("grpc", 6000), port("metrics", 8090)])
    message, causes = refused(lambda: kube.apply(SERVICES % ns + "/ds-dispatcher", changed,
                                                 manager="sluice-operator", force=True))
    assert message == 'Service "ds-dispatcher" is invalid: spec.ports[1].name: Duplicate value: "grpc"'
    assert causes == [("spec.ports[1].name", 'Duplicate value: "grpc"')]
    # A merge patch by the same manager replaces the list: one owner, the new ports only.
    patched = kube.merge_patch(SERVICES % ns + "/ds-dispatcher",
                               {"spec": {"ports": [port("grpc", 6000), port("metrics", 6001)]}},
                               {"fieldManager": "sluice-operator"})
    assert [(p["name"], p["port"]) for p in patched["spec"]["ports"]] == [("grpc", 6000), ("metrics", 6001)]
    managers = {(e["manager"], e["operation"]) for e in patched["metadata"]["managedFields"]}
    assert managers == {("sluice-operator", "Update")}


def test_apply_keeps_live_items_in_place_and_applied_items_in_their_order(kube, ns):
    kube.create(SERVICES % ns, service("order", [port("a", 1), port("c", 3)]), {"fieldManager": "someone"})
    applied = kube.apply(SERVICES % ns + "/order", service("order", [port("b", 2), port("c", 3)]),
                         manager="applier", force=True)
    assert [p["name"] for p in applied["spec"]["ports"]] == ["a", "b", "c"]


@pytest.mark.parametrize("ports, expected", [
    ([port("grpc", 5050), port("grpc", 8090)], [("spec.ports[1].name", 'Duplicate value: "grpc"')]),
    ([port("grpc", 5050), port("metrics", 5050)], [(
        "spec.ports[1]", 'Duplicate value: core.ServicePort{Name:"", Protocol:"TCP", AppProtocol:(*string)(nil), '
                         'Port:5050, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:""}, NodePort:0}')]),
    ([{"port": 5050, "protocol": "TCP"}, port("metrics", 8090)], [("spec.ports[0].name", "Required value")]),
    ([port("Grpc", 5050)], [("spec.ports[0].name", "Invalid value: \"Grpc\": a lowercase RFC 1123 label must consist "
                             "of lower case alphanumeric characters or '-', and must start and end with an alphanumeric "
                             "character (e.g. 'my-name',  or '123-abc', regex used for validation is "
                             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")]),
    ([port("grpc", 5050, target=70000)], [("spec.ports[0].targetPort",
                                           "Invalid value: 70000: must be between 1 and 65535, inclusive")]),
    ([port("grpc", 5050, target="a--b")], [("spec.ports[0].targetPort",
                                            'Invalid value: "a--b": must not contain consecutive hyphens')]),
    ([dict(port("grpc", 5050), protocol="HTTP")], [("spec.ports[0].protocol", 'Unsupported value: "HTTP": '
                                                    'supported values: "SCTP", "TCP", "UDP"')]),
    ([dict(port("grpc", 5050), nodePort=30000)], [("spec.ports[0].nodePort",
                                                   "Forbidden: may not be used when `type` is 'ClusterIP'")]),
])
def test_service_ports_are_validated(kube, ns, ports, expected):
    _, causes = refused(lambda: kube.create(SERVICES % ns, service("svc", ports)))
    assert causes == expected


def test_service_selector_labels_and_cluster_ip_are_validated(kube, ns):
    _, causes = refused(lambda: kube.create(SERVICES % ns, service("svc", [port("grpc", 1)], selector={"a": "b c"})))
    assert causes[0][0] == "spec.selector" and causes[0][1].startswith('Invalid value: "b c": a valid label')
    created = kube.create(SERVICES % ns, service("svc", [port("grpc", 1)]))
    moved = dict(created)
    moved["spec"] = dict(created["spec"], clusterIP="10.96.99.99")
    _, causes = refused(lambda: kube.replace(SERVICES % ns + "/svc", moved))
    assert causes == [("spec.clusterIP", 'Invalid value: "10.96.99.99": field is immutable')]


def pod(name, **container):
    body = {"name": "main", "image": "busybox:1.36"}
    body.update(container)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [body]}}


@pytest.mark.parametrize("container, expected", [
    ({"ports": [{"name": "grpc", "containerPort": 1}, {"name": "grpc", "containerPort": 2}]},
     [("spec.containers[0].ports[1].name", 'Duplicate value: "grpc"')]),
    ({"ports": [{"name": "grpc-metrics-endpoint", "containerPort": 1}]},
     [("spec.containers[0].ports[0].name", 'Invalid value: "grpc-metrics-endpoint": must be no more than 15 '
                                           'characters')]),
    ({"ports": [{"name": "grpc"}]}, [("spec.containers[0].ports[0].containerPort", "Required value")]),
    ({"env": [{"name": "1X", "value": "v"}]},
     [("spec.containers[0].env[0].name", "Invalid value: \"1X\": a valid environment variable name must consist of "
                                         "alphabetic characters, digits, '_', '-', or '.', and must not start with a "
                                         "digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used "
                                         "for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')")]),
    ({"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}}]},
     [("spec.containers[0].env[0].valueFrom.fieldRef.fieldPath",
       'Unsupported value: "spec.hostname": supported values: "metadata.name", "metadata.namespace", '
       '"metadata.uid", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.podIP", '
       '"status.podIPs"')]),
    ({"volumeMounts": [{"name": "journal", "mountPath": "/j"}]},
     [("spec.containers[0].volumeMounts[0].name", 'Not found: "journal"')]),
    ({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
     [("spec.containers[0].resources.requests", 'Invalid value: "2": must be less than or equal to cpu limit')]),
    ({"readinessProbe": {"httpGet": {"path": "/readyz", "port": 0}}},
     [("spec.containers[0].readinessProbe.httpGet.port", "Invalid value: 0: must be between 1 and 65535, inclusive")]),
])
def test_pod_containers_are_validated(kube, ns, container, expected):
    _, causes = refused(lambda: kube.create(PODS % ns, pod("p", **container)))
    assert causes == expected


def test_pod_scheduling_fields_are_validated(kube, ns):
    body = pod("p")
    body["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule",
                                    "tolerationSeconds": 60}]
    body["spec"]["nodeSelector"] = {"disk": "fast ssd"}
    body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]}}}
    _, causes = refused(lambda: kube.create(PODS % ns, body))
    fields = [f for f, _ in causes]
    assert fields == ["spec.nodeSelector",
                      "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
                      ".matchFields[0].values",
                      "spec.tolerations[0].effect"], causes
    assert causes[2][1] == ('Invalid value: "NoSchedule": effect must be \'NoExecute\' when `tolerationSeconds` is '
                            'set')
    assert causes[1][1] == ("Required value: must be only one value when `operator` is 'In' or 'NotIn' for node "
                            "field selector")


def test_the_pods_the_operator_builds_pass(kube, ns):
    """A dispatcher-like pod with every feature the operator's manifests use is accepted."""
    body = pod("ds-dispatcher", command=["sluice-dispatcher"], args=["--port=5050"],
               ports=[{"name": "grpc", "containerPort": 5050, "protocol": "TCP"},
                      {"name": "metrics", "containerPort": 8090, "protocol": "TCP"}],
               env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "SLUICE_DATASERVICE", "value": "ds"}],
               volumeMounts=[{"name": "journal", "mountPath": "/var/lib/sluice/journal"}],
               readinessProbe={"httpGet": {"path": "/readyz", "port": 8090}},
               resources={"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}})
    body["spec"]["volumes"] = [{"name": "journal", "persistentVolumeClaim": {"claimName": "ds-dispatcher-journal"}}]
    body["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}}}
    created = kube.create(PODS % ns, body)
    assert created["metadata"]["name"] == "ds-dispatcher"


def test_a_create_in_a_terminating_namespace_is_refused_with_the_namespace_terminating_cause(kube, ns):
    kube.create(PODS % ns, dict(pod("held"), metadata={"name": "held", "finalizers": ["test/hold"]}))
    kube.delete("/api/v1/namespaces/" + ns)
    assert kube.get("/api/v1/namespaces/" + ns)["status"]["phase"] == "Terminating"
    with pytest.raises(ApiException) as exc:
        kube.create(PODS % ns, pod("late"))
    assert exc.value.status == 403
    assert exc.value.body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "late" is forbidden: unable to create new content in namespace %s because it is being '
                   'terminated' % ns,
        "reason": "Forbidden",
        "details": {"name": "late", "kind": "pods", "causes": [
            {"reason": "NamespaceTerminating", "message": "namespace %s is being terminated" % ns,
             "field": "metadata.namespace"}]},
        "code": 403}
    # Updates are still allowed (a controller may patch status and finalizers).
    kube.json_patch(PODS % ns + "/held", [{"op": "remove", "path": "/metadata/finalizers"}])


# ------------------------------------------------------------------------ foreground deletion, namespace deletion

WIDGETS = "/apis/test.sluice.dev/v1/namespaces/%s/widgets"


def owned_pod(name, owner, block=True, finalizers=None):
    body = pod(name)
    body["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                            "controller": True, "blockOwnerDeletion": block}]
    if finalizers:
        body["metadata"]["finalizers"] = finalizers
    return body


def widget(name, ns, finalizers=None):
    meta = {"name": name, "namespace": ns}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "test.sluice.dev/v1", "kind": "Widget", "metadata": meta, "spec": {"image": "w:1"}}


def test_foreground_deletion_deletes_every_dependent_at_once_and_waits_only_for_blocking_ones(kube, ns):
    """Not recorded (the recordings delete in the background); as Kubernetes' apiserver and garbage collector do:
    the finalizer is added even to an owner without dependents, every dependent is deleted at once whatever its
    own finalizers and whatever the owner's other finalizers, and only blockOwnerDeletion dependents hold it."""
    lone = kube.create(WIDGETS % ns, widget("lone", ns, finalizers=["test/keep"]))
    answer = kube.delete(WIDGETS % ns + "/lone", body={"propagationPolicy": "Foreground"})
    assert "foregroundDeletion" in answer["metadata"]["finalizers"]
    assert kube.get(WIDGETS % ns + "/lone")["metadata"]["finalizers"] == ["test/keep"], lone

    owner = kube.create(WIDGETS % ns, widget("fg", ns, finalizers=["sluice.dev/drain"]))
    node = ns + "-node"
    kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    blocking = owned_pod("blocking", owner, finalizers=["test/hold"])
    kube.create(PODS % ns, blocking)
    bound = owned_pod("bound", owner)
    bound["spec"]["nodeName"] = node
    kube.create(PODS % ns, bound)
    kube.create(PODS % ns, owned_pod("free", owner, block=False, finalizers=["test/hold"]))
    kube.delete(WIDGETS % ns + "/fg", body={"propagationPolicy": "Foreground"})
    # Every dependent is being deleted, although the owner's own finalizer still holds the owner.
    pods = {p["metadata"]["name"]: p["metadata"] for p in kube.get(PODS % ns)["items"]}
    assert all(m.get("deletionTimestamp") for m in pods.values()), pods
    assert pods["bound"]["deletionGracePeriodSeconds"] == 30
    held = kube.get(WIDGETS % ns + "/fg")["metadata"]
    assert held["finalizers"] == ["sluice.dev/drain", "foregroundDeletion"]
    # The non-blocking dependent does not hold the owner; the blocking ones do, until they are gone.
    kube.json_patch(PODS % ns + "/blocking", [{"op": "remove", "path": "/metadata/finalizers"}])
    assert "foregroundDeletion" in kube.get(WIDGETS % ns + "/fg")["metadata"]["finalizers"]
    kube.delete(PODS % ns + "/bound", {"gracePeriodSeconds": "0"})  # its kubelet confirms
    assert kube.get(WIDGETS % ns + "/fg")["metadata"]["finalizers"] == ["sluice.dev/drain"]
    kube.json_patch(WIDGETS % ns + "/fg", [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(ApiException) as exc:
        kube.get(WIDGETS % ns + "/fg")
    assert exc.value.status == 404


def test_a_namespace_deletion_hold_leaves_named_resources_until_lifted(kube, ns, server):
    kube.create(WIDGETS % ns, widget("w", ns))
    kube.create(PODS % ns, pod("p"))
    kube.call("POST", "/_admin/config", {"namespaceDeletionHold": ["widgets.test.sluice.dev"]})
    try:
        kube.delete("/api/v1/namespaces/" + ns)
        assert kube.get(PODS % ns)["items"] == []
        assert [w["metadata"].get("deletionTimestamp") for w in kube.get(WIDGETS % ns)["items"]] == [None]
        with pytest.raises(ApiException) as exc:
            kube.create(PODS % ns, pod("again"))
        assert exc.value.status == 403
    finally:
        answer = kube.call("POST", "/_admin/config", {"namespaceDeletionHold": []})
    assert answer["namespaceDeletionHold"] == []
    with pytest.raises(ApiException) as exc:
        kube.get("/api/v1/namespaces/" + ns)
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:
        kube.call("POST", "/_admin/config", {"namespaceDeletionHold": "widgets"})
    assert exc.value.status == 400


def test_a_dependent_created_while_its_owner_waits_in_foreground_is_collected(kube, ns):
    """A controller with a stale cache may create a dependent after the collector deleted the others; the real
    collector deletes it too, or the owner would wait for it forever."""
    owner = kube.create(WIDGETS % ns, widget("late", ns, finalizers=["sluice.dev/drain"]))
    kube.create(PODS % ns, owned_pod("first", owner, finalizers=["test/hold"]))
    kube.delete(WIDGETS % ns + "/late", body={"propagationPolicy": "Foreground"})
    late = kube.create(PODS % ns, owned_pod("second", owner))
    assert late["metadata"]["name"] == "second"  # the create succeeds ...
    with pytest.raises(ApiException) as exc:     # ... and the collector removes it (unbound: at once)
        kube.get(PODS % ns + "/second")
    assert exc.value.status == 404
    kube.json_patch(PODS % ns + "/first", [{"op": "remove", "path": "/metadata/finalizers"}])
    assert kube.get(WIDGETS % ns + "/late")["metadata"]["finalizers"] == ["sluice.dev/drain"]
