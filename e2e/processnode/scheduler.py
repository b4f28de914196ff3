"""Scheduler: binds unscheduled pods to this process node when they fit (a trivial kube-scheduler).

Runs one thread plus two informers (unscheduled pods, nodes); the pending map and node map are guarded by its
own mutex, the capacity bookkeeping by the agent's.
"""

import collections
import http.client
import threading
import time
import zlib

from .. import quantity
from ..client import ApiException
from . import podspec
from .informer import Informer
from .util import log, utc_now



class Scheduler:
    """Binds unscheduled pods that fit this node (nodeSelector, taints, CPU, memory, pod count).

    Several nodes may schedule at once. The scheduling nodes a pod could go to (Ready, selector and taints
    match) are ranked by a hash of pod and node (rendezvous hashing); the node ranked r tries the pod only
    after it has waited r * `patience` seconds. That spreads pods evenly, keeps nodes from racing for the same
    pod, and still places a pod whose first choice is full. A lost race is a harmless 409."""

    patience = 2.0
    # A pending pod no scheduling node can ever take (node selector, affinity, taints) is marked
    # PodScheduled=False/Unschedulable after this long, as kube-scheduler reports it.
    unschedulable_after = 2 * patience
    SCHEDULER_LABEL = "sluice.dev/process-node-scheduler"

    def __init__(self, agent):
        self.agent = agent
        self._mu = threading.Lock()
        self._pending = collections.OrderedDict()  # uid -> (pod, first seen)
        self._nodes = {}  # name -> node
        self._wake = threading.Event()
        self._reported = set()  # uids marked unschedulable (scheduler thread only)
        self.informer = Informer(agent.client, "/api/v1/pods", {"fieldSelector": "spec.nodeName="},
                                 self._sync, self._event, agent.stop_event, "unscheduled")
        self.node_informer = Informer(agent.client, "/api/v1/nodes", {}, self._sync_nodes, self._node_event,
                                      agent.stop_event, "nodes")
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self):
        self.node_informer.start()
        self.node_informer.synced.wait(30)
        self.informer.start()
        self._thread.start()

    def interrupt(self):
        self.informer.interrupt()
        self.node_informer.interrupt()

    def wake(self):
        self._wake.set()

    def _sync_nodes(self, nodes):
        with self._mu:
            self._nodes = {n["metadata"]["name"]: n for n in nodes}

    def _node_event(self, event_type, node):
        with self._mu:
            if event_type == "DELETED":
                self._nodes.pop(node["metadata"]["name"], None)
            else:
                self._nodes[node["metadata"]["name"]] = node
        self.wake()

    def _sync(self, pods):
        now = time.monotonic()
        with self._mu:
            previous = self._pending
            self._pending = collections.OrderedDict()
            for pod in pods:
                uid = pod["metadata"]["uid"]
                self._pending[uid] = (pod, previous[uid][1] if uid in previous else now)
        self.wake()

    def _event(self, event_type, pod):
        uid = pod["metadata"]["uid"]
        with self._mu:
            if event_type == "DELETED" or (pod.get("spec") or {}).get("nodeName") \
                    or pod["metadata"].get("deletionTimestamp"):
                self._pending.pop(uid, None)
            else:
                seen = self._pending.get(uid, (None, time.monotonic()))[1]
                self._pending[uid] = (pod, seen)
        self.wake()

    def _free(self):
        config = self.agent.config
        with self.agent._mu:
            used = list(self.agent.bound.values())
        cpu = quantity.cpu_millis(config.cpu) - sum(c for c, _ in used)
        memory = quantity.as_int(config.memory) - sum(m for _, m in used)
        return cpu, memory, config.pods - len(used)

    def _rank(self, pod, nodes, me):
        """This node's place among the scheduling nodes that could take the pod (0 = first choice)."""
        eligible = [me]
        for node in nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            taints = (node.get("spec") or {}).get("taints") or []
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (node.get("status") or {}).get("conditions") or [])
            name = node["metadata"]["name"]
            if name != me and ready and labels.get(self.SCHEDULER_LABEL) == "true" \
                    and podspec.fits(pod, labels, taints, 1 << 62, 1 << 62, 1, node_name=name):
                eligible.append(name)
        uid = pod["metadata"]["uid"]
        eligible.sort(key=lambda n: zlib.crc32((uid + n).encode()), reverse=True)
        return eligible.index(me)

    def _loop(self):
        agent = self.agent
        me = agent.config.node_name
        while not agent.stop_event.is_set():
            self._wake.wait(self.patience / 2)
            self._wake.clear()
            with self._mu:
                candidates = list(self._pending.values())
                nodes = list(self._nodes.values())
            now = time.monotonic()
            for pod, seen in candidates:
                if agent.stop_event.is_set():
                    return
                spec = pod.get("spec") or {}
                if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
                    continue
                if now - seen < self.patience * self._rank(pod, nodes, me):
                    continue
                cpu, memory, count = self._free()
                if not podspec.fits(pod, agent.node_labels, agent.config.taints, cpu, memory, count,
                                    node_name=me):
                    self._maybe_report_unschedulable(pod, now - seen, nodes, me)
                    continue
                if self._bind(pod):
                    with self._mu:
                        self._pending.pop(pod["metadata"]["uid"], None)

    def _maybe_report_unschedulable(self, pod, waited, nodes, me):
        """Writes PodScheduled=False (reason Unschedulable, a message shaped like kube-scheduler's) on a pod that no
        Ready scheduling node can take whatever its free resources. One node reports: the first by name."""
        uid = pod["metadata"]["uid"]
        if uid in self._reported or waited < self.unschedulable_after:
            return
        scheduling = {me: (self.agent.node_labels, self.agent.config.taints)}
        for node in nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (node.get("status") or {}).get("conditions") or [])
            if ready and labels.get(self.SCHEDULER_LABEL) == "true":
                scheduling[node["metadata"]["name"]] = (labels, (node.get("spec") or {}).get("taints") or [])
        if me != min(scheduling):
            return
        if any(podspec.fits(pod, labels, taints, 1 << 62, 1 << 62, 1, node_name=name)
               for name, (labels, taints) in scheduling.items()):
            return  # a node can take it once it has room
        count = len(scheduling)
        message = ("0/%d nodes are available: %d node(s) didn't match Pod's node affinity/selector or had untolerated "
                   "taints." % (count, count))
        patch = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": message, "lastProbeTime": None,
                                            "lastTransitionTime": utc_now()}]}}
        try:
            self.agent.client.merge_patch(self.agent.pod_path(pod) + "/status", patch)
            self._reported.add(uid)
        except ApiException as exc:
            if exc.status == 404:
                self._reported.add(uid)
            else:
                log("marking %s unschedulable failed: %s" % (pod["metadata"]["name"], exc))
        except (OSError, http.client.HTTPException) as exc:
            log("marking %s unschedulable failed: %s" % (pod["metadata"]["name"], exc))

    def _bind(self, pod):
        agent = self.agent
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod["metadata"]["name"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": agent.config.node_name}}
        try:
            agent.client.create(agent.pod_path(pod) + "/binding", binding)
            with agent._mu:
                agent.bound[pod["metadata"]["uid"]] = podspec.pod_requests(pod)
            return True
        except ApiException as exc:
            if exc.status in (404, 409):
                return True
            log("binding %s failed: %s" % (pod["metadata"]["name"], exc))
        except (OSError, http.client.HTTPException) as exc:
            log("binding %s failed: %s" % (pod["metadata"]["name"], exc))
        return False
