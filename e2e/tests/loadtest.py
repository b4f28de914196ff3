"""Load check of the test API server and simulated process nodes at operator-benchmark scale.

    /usr/bin/python3 -m e2e.tests.loadtest --owners 1000 --pods-per-owner 8 --nodes 4

Creates `owners` custom resources, each with `pods-per-owner` pods owned by it (from --threads client
threads, while four watches stream like an operator's informers), waits until simulated scheduling nodes have
bound every pod and marked it Running, lists all pods once, then deletes a tenth of the owners and waits for
garbage collection and the nodes' deletion confirmations. Prints the time of each phase and the server's
request counts. Not a pytest test (it takes about a minute at full scale); see
docs/testing-without-a-cluster.md for measured numbers.
"""

import argparse
import json
import sys
import threading
import time

from e2e import harness
from e2e.client import KubeClient
from e2e.tests.conftest import WIDGET_CRD, widget

OWNERS = "/apis/test.sluice.dev/v1/namespaces/default/widgets"
PODS = "/api/v1/namespaces/default/pods"


def create_owners(client, indices, pods_per_owner):
    for i in indices:
        owner = client.create(OWNERS, widget("w%d" % i, "default"))
        ref = [{"apiVersion": "test.sluice.dev/v1", "kind": "Widget", "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        for j in range(pods_per_owner):
            client.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": "w%d-%d" % (i, j), "labels": {"owner": "w%d" % i},
                                              "ownerReferences": ref},
                                 "spec": {"containers": [{"name": "c", "image": "sluice/worker:dev",
                                                          "resources": {"requests": {"cpu": "100m",
                                                                                     "memory": "100Mi"}}}]}})
        client.merge_patch(OWNERS + "/w%d/status" % i, {"status": {"replicas": pods_per_owner}})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--owners", type=int, default=1000)
    p.add_argument("--pods-per-owner", type=int, default=8)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--threads", type=int, default=8)
    args = p.parse_args(argv)
    total = args.owners * args.pods_per_owner
    with harness.Cluster(kubeconfig="") as cluster:
        cluster.apply(WIDGET_CRD)
        for i in range(args.nodes):
            cluster.add_node("sim-%d" % i, cpu="100000", memory="100000Gi", pods=total, simulated=True,
                             schedule=True)
        events = {}
        for path in ("/api/v1/pods", "/apis/test.sluice.dev/v1/widgets", "/api/v1/services", "/api/v1/nodes"):
            def watch(path=path):
                client = KubeClient(cluster.client.config)
                for _ in client.watch(path, {"timeoutSeconds": "3600"}):
                    events[path] = events.get(path, 0) + 1
            threading.Thread(target=watch, daemon=True).start()

        start = time.monotonic()
        workers = [threading.Thread(target=create_owners, args=(KubeClient(cluster.client.config),
                                                                range(k, args.owners, args.threads),
                                                                args.pods_per_owner))
                   for k in range(args.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        created = time.monotonic()
        print("created %d owners and %d pods in %.1f s" % (args.owners, total, created - start), flush=True)

        def all_running():
            pods = cluster.client.get(PODS, {"fieldSelector": "status.phase=Running"})["items"]
            return len(pods) == total
        cluster.wait_for(all_running, 600, "every pod Running")
        running = time.monotonic()
        print("all pods bound and Running %.1f s later" % (running - created), flush=True)

        listed = cluster.client.request("GET", "/api/v1/pods")
        print("listing %d pods took %.2f s (%d bytes)" % (total, time.monotonic() - running, len(listed.body)))

        deleted_owners = list(range(0, args.owners, 10))
        start_delete = time.monotonic()
        for i in deleted_owners:
            cluster.client.delete(OWNERS + "/w%d" % i)
        remaining = total - len(deleted_owners) * args.pods_per_owner
        cluster.wait_for(lambda: len(cluster.client.get(PODS)["items"]) == remaining, 600, "garbage collection")
        print("deleting %d owners: dependents collected and confirmed by the nodes in %.1f s"
              % (len(deleted_owners), time.monotonic() - start_delete))
        stats = cluster.client.get("/_admin/stats")
        print("server: %s" % json.dumps({k: stats[k] for k in ("requests", "verbs", "objects", "resourceVersion")}))
        print("watch events: %s" % json.dumps(events))
    return 0


if __name__ == "__main__":
    sys.exit(main())
