"""Command line of the process node: `python3 -m e2e.processnode --node-name n1 --server URL ...`.

Registers the node, runs (or simulates) the pods bound to it and exits cleanly on SIGTERM/SIGINT, killing every
process it started. Exit codes: 0 after a signal, 2 for bad flags or an unreachable API server.
"""

import argparse
import os
import signal
import sys

if __package__ in (None, ""):
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(_here)))

from e2e.client import ApiException, KubeClient, KubeConfig  # noqa: E402
from e2e.processnode.agent import NodeAgent, NodeConfig  # noqa: E402
from e2e.processnode.podspec import ImageMap  # noqa: E402


def _pairs(values, flag):
    out = {}
    for value in values or []:
        for item in value.split(","):
            if not item:
                continue
            key, sep, val = item.partition("=")
            if not sep or not key:
                raise SystemExit("%s expects key=value, got %r" % (flag, item))
            out[key] = val
    return out


def _taints(values):
    out = []
    for value in values or []:
        head, sep, effect = value.rpartition(":")
        if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise SystemExit("--taint expects key[=value]:NoSchedule|PreferNoSchedule|NoExecute, got %r" % value)
        key, _, val = head.partition("=")
        taint = {"key": key, "effect": effect}
        if val:
            taint["value"] = val
        out.append(taint)
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m e2e.processnode",
                                description="Plays kubelet for one node (see docs/testing-without-a-cluster.md)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--kubeconfig", help="kubeconfig of the API server")
    target.add_argument("--server", help="API server URL (with --token)")
    p.add_argument("--token", help="bearer token for --server")
    p.add_argument("--insecure", action="store_true", help="skip TLS verification for --server")
    p.add_argument("--node-name", required=True)
    p.add_argument("--cpu", default="8", help="allocatable CPU (quantity, default 8)")
    p.add_argument("--memory", default="16Gi", help="allocatable memory (quantity, default 16Gi)")
    p.add_argument("--pods", type=int, default=110, help="pod capacity (default 110)")
    p.add_argument("--label", action="append", help="node label key=value (repeatable, comma lists allowed)")
    p.add_argument("--taint", action="append", help="node taint key[=value]:Effect (repeatable)")
    p.add_argument("--image-map", help="JSON/YAML file mapping images to host binaries")
    p.add_argument("--log-dir", default="pod-logs", help="directory for <namespace>_<pod>_<container>.log files")
    p.add_argument("--work-dir", help="directory for volumes and pod sandboxes (default <log-dir>/volumes)")
    p.add_argument("--ip-base", default="127.0.0.2", help="first loopback address handed to pods")
    p.add_argument("--simulated", action="store_true", help="mark pods Running/Ready without running anything")
    p.add_argument("--schedule", action="store_true", help="bind unscheduled pods that fit this node")
    p.add_argument("--heartbeat", type=float, default=10.0, help="seconds between node Lease renewals")
    p.add_argument("--probe-period-cap", type=float, help="cap probe periods (seconds) to speed up tests")
    p.add_argument("--workers", type=int, default=8, help="status writers in simulated mode")
    p.add_argument("--pass-env", action="append", default=[], help="also pass this variable of the node's "
                                                                   "environment to pods (repeatable)")
    p.add_argument("--service-wait", type=float, default=30.0,
                   help="seconds to wait for endpoints of services named in args/env before starting anyway")
    p.add_argument("--shutdown-grace", type=float, default=5.0,
                   help="seconds pods get between SIGTERM and SIGKILL when the node stops")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.kubeconfig:
            kube_config = KubeConfig.from_file(args.kubeconfig)
        else:
            kube_config = KubeConfig(args.server, token=args.token, insecure=args.insecure)
        image_map = ImageMap.load(args.image_map)
    except (OSError, ValueError) as exc:
        print("processnode: %s" % exc, file=sys.stderr)
        return 2
    config = NodeConfig(args.node_name, args.cpu, args.memory, args.pods, _pairs(args.label, "--label"),
                        _taints(args.taint), image_map, args.log_dir, args.work_dir, args.ip_base, args.simulated,
                        args.schedule, args.heartbeat, args.probe_period_cap, args.workers, args.pass_env,
                        args.service_wait, args.shutdown_grace)
    client = KubeClient(kube_config, user_agent="sluice-processnode/1.0 (%s)" % args.node_name)
    agent = NodeAgent(client, config, kube_config.server)

    def stop(signum, frame):
        agent.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        agent.start()
    except (ApiException, OSError, ValueError) as exc:
        print("processnode: cannot register node %s: %s" % (args.node_name, exc), file=sys.stderr)
        agent.stop()
        return 2
    print("processnode: node %s ready (%s)" % (args.node_name, "simulated" if args.simulated else "processes"),
          file=sys.stderr, flush=True)
    agent.wait()
    agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
