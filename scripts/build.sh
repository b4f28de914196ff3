#!/usr/bin/env bash
# Configures and builds Sluice (Release, Ninja) into ./build. Extra arguments are ninja targets.
# Concurrent invocations on one build directory wait for each other (flock on BUILD_DIR/.lock).
# Usage: scripts/build.sh [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
JOBS=${SLUICE_JOBS:-$(nproc)}
mkdir -p "$BUILD_DIR"
exec 9>"$BUILD_DIR/.lock"
flock 9
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SLUICE_CMAKE_ARGS:-} >/dev/null
fi
ninja -C "$BUILD_DIR" -j "$JOBS" "$@"
