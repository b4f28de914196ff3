"""A fake Prometheus HTTP API for `sluice bench autoscaler`: answers the autoscaler's default queries (batched,
`sum by (namespace, dataservice) (...)`: autoscaler/sources/prometheus_source.cc) for N DataServices ds-0000...
of one namespace, each in the same steady state: W workers producing what the trainers want at 80 % of their
CPU, the trainers stalling 2 % of the time (under the default target of 5 %), fresh data. The policy then keeps
W workers, so the benchmark measures the autoscaler's steady cost: every DataService re-decided every period.

    python3 fake_prometheus.py --port-file F --dataservices 1000 --namespace bench --workers 2

GET /api/v1/query?query=...  a vector with one sample per DataService;  GET /stats  {"queries": n}.
Standard library only; one thread per request.
"""

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PER_WORKER = 50.0


def signal_of(query):
    if query.startswith("time() -"):
        return "freshness"
    if "sluice_client_wait_seconds_total" in query:
        return "computePerElement" if query.lstrip().startswith("(") else "stallRatio"
    for metric, name in (("sluice_client_elements_total", "demand"),
                         ("sluice_worker_elements_produced_total", "supply"),
                         ("sluice_worker_busy_seconds_total", "workerCpu"),
                         ("sluice_worker_buffered_elements", "buffered"),
                         ("sluice_dispatcher_worker_removals_total", "churn")):
        if metric in query:
            return name
    if "sluice_dispatcher_workers" in query:
        return "localWorkers" if 'placement="local"' in query else "workers"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--dataservices", type=int, required=True)
    parser.add_argument("--namespace", default="bench")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    supply = PER_WORKER * 0.8 * args.workers
    values = {"freshness": 1.0, "stallRatio": 0.02, "computePerElement": 0.98 / supply, "demand": supply,
              "supply": supply, "workerCpu": 0.8 * args.workers, "buffered": 100.0, "churn": 0.0,
              "workers": float(args.workers), "localWorkers": 0.0}
    names = ["ds-%04d" % i for i in range(args.dataservices)]
    state = {"queries": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            url = urlsplit(self.path)
            if url.path == "/stats":
                with lock:
                    self.reply(200, dict(state))
                return
            if url.path != "/api/v1/query":
                self.reply(404, {"status": "error", "errorType": "not_found", "error": url.path})
                return
            query = (parse_qs(url.query).get("query") or [""])[0]
            name = signal_of(query)
            with lock:
                state["queries"] += 1
            if name is None:
                self.reply(400, {"status": "error", "errorType": "bad_data", "error": "unknown query"})
                return
            now = time.time()
            value = repr(values[name])
            result = [{"metric": {"namespace": args.namespace, "dataservice": n}, "value": [now, value]}
                      for n in names if 'dataservice="' not in query or 'dataservice="%s"' % n in query]
            self.reply(200, {"status": "success", "data": {"resultType": "vector", "result": result}})

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
