#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs dependencies, builds, runs ctest.
# Usage: scripts/test.sh [ctest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
start=$(date +%s)
scripts/build.sh
echo "build: $(( $(date +%s) - start )) s" >&2
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 300 -j "${SLUICE_TEST_JOBS:-2}" "$@"
