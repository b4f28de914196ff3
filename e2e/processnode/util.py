"""Small helpers shared by the process node's modules: timestamps, logging, pod status fragments."""

import sys
import time


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def utc_micro_now():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def log(message):
    print("processnode: %s" % message, file=sys.stderr, flush=True)


def is_ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def named_port(pod, name):
    """The containerPort called `name` in any container of the pod, or None."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == name:
                return port.get("containerPort")
    return None


def conditions(ready, timestamp):
    value = "True" if ready else "False"
    return [{"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": timestamp}
            for ctype, status in (("Initialized", "True"), ("Ready", value), ("ContainersReady", value),
                                  ("PodScheduled", "True"))]
