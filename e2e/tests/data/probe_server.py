"""A pod process for process-node tests: HTTP on --host:--port; /ready answers 200 once --ready-file exists.

Prints its arguments and a few environment variables at start, and "terminated" when it gets SIGTERM.
"""

import argparse
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--host", required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--ready-file", required=True)
args, _extra = parser.parse_known_args()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        ready = os.path.exists(args.ready_file)
        code = 200 if self.path != "/ready" or ready else 503
        body = json.dumps({"ready": ready, "env": {k: v for k, v in os.environ.items()
                                                   if k.startswith(("POD_", "NODE", "GREETING", "FROM_"))}}).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def on_term(signum, frame):
    print("terminated", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
print("argv=%s" % json.dumps(sys.argv[1:]), flush=True)
print("env=%s" % json.dumps({k: os.environ.get(k) for k in ("POD_NAME", "POD_IP", "NODE", "GREETING", "FROM_CM")}),
      flush=True)
HTTPServer((args.host, args.port), Handler).serve_forever()
