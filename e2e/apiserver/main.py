"""Command line of the test API server: `python3 -m e2e.apiserver --port 0 --port-file F`.

Also runnable as a script (`python3 e2e/apiserver/main.py ...`). Prints the URL on stdout once listening and,
with --port-file, writes the chosen port there (atomically) so tests can find a server started on port 0.
"""

import argparse
import os
import signal
import sys

if __package__ in (None, ""):
    # Run as a script: import the package from the repository root, not from this directory.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(_here)))

from e2e.apiserver.server import ApiServer, Config  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m e2e.apiserver",
                                description="Test-only Kubernetes API server (see docs/testing-without-a-cluster.md)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free port (default 0)")
    p.add_argument("--port-file", help="write the chosen port to this file once listening")
    p.add_argument("--url-file", help="write the server URL to this file once listening")
    p.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (needs --tls-key)")
    p.add_argument("--tls-key", help="PEM private key for --tls-cert")
    p.add_argument("--token-file", help="static token CSV (token,user,uid,\"group1,group2\"); unknown tokens get 401")
    p.add_argument("--rbac-policy", help="YAML/JSON policy granting rules to users/groups; denied requests get 403")
    p.add_argument("--history-size", type=int, default=10000,
                   help="watch events kept for resuming watches; older resourceVersions get 410 (default 10000)")
    p.add_argument("--bookmark-interval", type=float, default=60.0,
                   help="seconds between BOOKMARK events on watches that allow them (default 60)")
    p.add_argument("--watch-timeout", type=float, default=1800.0,
                   help="longest watch when the client gives no timeoutSeconds (default 1800)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every request to stderr")
    args = p.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("--tls-cert and --tls-key go together")
    return args


def _write_atomically(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    config = Config(args.host, args.port, args.tls_cert, args.tls_key, args.token_file, args.rbac_policy,
                    args.history_size, args.bookmark_interval, args.watch_timeout, args.verbose)
    try:
        server = ApiServer(config)
    except (OSError, ValueError) as exc:
        print("apiserver: cannot start: %s" % exc, file=sys.stderr)
        return 2
    if args.port_file:
        _write_atomically(args.port_file, "%d\n" % server.port)
    if args.url_file:
        _write_atomically(args.url_file, server.url + "\n")
    print("Listening on %s" % server.url, flush=True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
