#!/usr/bin/env bash
# Sluice's main job on its embedded local default, from a fresh Debian machine: installs
# dependencies, builds the tool and the daemons, and runs `sluice up` — the autoscaled data service
# on this machine: a dispatcher, one worker, the local autoscaler and a stand-in trainer whose
# demand rises (workers are added until its stall is under target) then falls (they are drained
# and removed), with a live line per decision and its reason, then a summary.
# Usage: scripts/run.sh [sluice up flags...]   e.g. --step-ms 3 --max-workers 8
#        scripts/run.sh --no-autoscale --workers 4 --pipeline my.yaml --step-ms 20   (fixed workers)
#        scripts/run.sh --trainer fashion-mnist-cnn   (a real PyTorch trainer through the Python client)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh sluice sluice-dispatcher sluice-worker sluice_python >/dev/null  # sluice_python: for --trainer
exec "${SLUICE_BUILD_DIR:-build}/bin/sluice" up "$@"
