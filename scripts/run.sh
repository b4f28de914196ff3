#!/usr/bin/env bash
# Sluice's main job on its embedded local default, from a fresh Debian machine: installs
# dependencies, builds the tool and the daemons, and runs `sluice up` — a dispatcher and two
# workers on this machine serving the example Fashion-MNIST training-input pipeline to a consumer,
# with a progress line, throughput, the consumer's stall ratio and what each worker produced.
# Usage: scripts/run.sh [sluice up flags...]   e.g. --workers 4 --pipeline my.yaml --step-ms 20
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh sluice sluice-dispatcher sluice-worker >/dev/null
exec "${SLUICE_BUILD_DIR:-build}/bin/sluice" up "$@"
