#!/usr/bin/python3
"""A pod process for process-node tests: writes what it was given (argv, env, cwd, files) as JSON, then waits.

Usage: report.py OUTPUT_FILE [FILE_TO_READ ...]; exits with the code in $EXIT_CODE if set, else sleeps.
"""

import json
import os
import sys
import time

out = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ), "files": {}}
for path in sys.argv[2:]:
    try:
        with open(path) as fh:
            out["files"][path] = fh.read()
    except OSError as exc:
        out["files"][path] = "ERROR: %s" % exc
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump(out, fh)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
if "EXIT_CODE" in os.environ:
    sys.exit(int(os.environ["EXIT_CODE"]))
time.sleep(3600)
