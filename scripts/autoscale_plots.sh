#!/usr/bin/env bash
# Regenerates the simulator's figures and results table in docs/: builds `sluice`, runs
# `sluice bench autoscale` (all scenarios and policies, deterministic), draws docs/img/autoscale-*.png
# with Debian's python3-matplotlib, puts the table into docs/autoscaling.md between its
# `<!-- simulator-table -->` markers and the JSON line into docs/img/autoscale-result.json.
# Usage: scripts/autoscale_plots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh sluice >/dev/null
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BUILD_DIR/bin/sluice" bench autoscale --series-dir "$tmp/series" --markdown "$tmp/table.md" >"$tmp/result.json"
tail -n 1 "$tmp/result.json" >docs/img/autoscale-result.json
/usr/bin/python3 sim/report/plot_autoscale.py "$tmp/series" docs/img
/usr/bin/python3 - "$tmp/table.md" docs/autoscaling.md <<'PY'
import sys
table = open(sys.argv[1]).read()
doc = open(sys.argv[2]).read()
begin, end = "<!-- simulator-table -->", "<!-- /simulator-table -->"
if begin not in doc or end not in doc:
    sys.exit(f"{sys.argv[2]}: the markers {begin} and {end} are missing")
head, rest = doc.split(begin, 1)
_, tail = rest.split(end, 1)
open(sys.argv[2], "w").write(head + begin + "\n" + table + "\n" + end + tail)
PY
echo "autoscale_plots: docs/img/autoscale-*.png, docs/img/autoscale-result.json and the table in docs/autoscaling.md" >&2
