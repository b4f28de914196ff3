#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs dependencies, builds, runs ctest.
# Prints each phase's wall time on stderr (setup, build, tests, total): CI must stay under 30 minutes.
# Usage: scripts/test.sh [ctest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
scripts/setup.sh
t1=$(date +%s)
echo "test.sh: setup: $(( t1 - t0 )) s" >&2
scripts/build.sh
t2=$(date +%s)
echo "test.sh: build: $(( t2 - t1 )) s" >&2
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
status=0
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 300 -j "${SLUICE_TEST_JOBS:-2}" "$@" || status=$?
t3=$(date +%s)
echo "test.sh: tests: $(( t3 - t2 )) s (ctest exit status $status)" >&2
echo "test.sh: total: $(( t3 - t0 )) s (setup $(( t1 - t0 )), build $(( t2 - t1 )), tests $(( t3 - t2 )))" >&2
exit "$status"
