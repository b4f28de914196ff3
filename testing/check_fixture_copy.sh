#!/usr/bin/env bash
# testing/kube-fixtures is the project's copy of the recorded Kubernetes exchanges that the steering
# repository keeps in shared/kube-fixtures. When that repository is checked out beside this one (as
# in CI), the copy must be identical: a re-recorded fixture must reach the tests.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
copy="$src/testing/kube-fixtures"
upstream="${SLUICE_UPSTREAM_FIXTURES:-$src/../shared/kube-fixtures}"
[ -f "$copy/README.md" ] || { echo "missing $copy/README.md: the fixture copy is incomplete" >&2; exit 1; }
if [ ! -d "$upstream" ]; then
  echo "no $upstream beside the repository: the copy ($(ls "$copy" | wc -l) files) is used as it is"
  exit 0
fi
if ! diff -r "$upstream" "$copy"; then
  echo "testing/kube-fixtures differs from $upstream: copy it again (cp $upstream/* $copy/)" >&2
  exit 1
fi
echo "testing/kube-fixtures matches $upstream ($(ls "$copy" | wc -l) files)"
