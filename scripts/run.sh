#!/usr/bin/env bash
# Sluice's main job on its embedded local default, from a fresh Debian machine: installs
# dependencies, builds the `sluice` tool and runs the example Fashion-MNIST training-input pipeline
# locally, printing progress, throughput and a per-stage table.
# Usage: scripts/run.sh [pipeline.yaml] [sluice pipeline run flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh sluice >/dev/null
spec=${1:-examples/pipelines/fashion_mnist.yaml}
shift || true
exec "${SLUICE_BUILD_DIR:-build}/bin/sluice" pipeline run "$spec" "$@"
