#!/usr/bin/env bash
# testing/kube-fixtures holds exchanges recorded from a real Kubernetes API server (v1.26; its README says
# what each file shows); the tests read only these files. To refresh them, record again and copy the new
# files over the old ones (cp <recordings>/* testing/kube-fixtures/). This check keeps the copy true to the
# recordings it came from: when a directory of recordings is at hand ($SLUICE_UPSTREAM_FIXTURES, by default
# ../shared/kube-fixtures beside the checkout), the copy must equal it, so that a re-recorded file reaches the
# tests; without one the copy is used as it is.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
copy="$src/testing/kube-fixtures"
upstream="${SLUICE_UPSTREAM_FIXTURES:-$src/../shared/kube-fixtures}"
[ -f "$copy/README.md" ] || { echo "missing $copy/README.md: the fixture copy is incomplete" >&2; exit 1; }
if [ ! -d "$upstream" ]; then
  echo "no recordings at $upstream: the copy ($(ls "$copy" | wc -l) files) is used as it is"
  exit 0
fi
if ! diff -r "$upstream" "$copy"; then
  echo "testing/kube-fixtures differs from $upstream: copy it again (cp $upstream/* $copy/)" >&2
  exit 1
fi
echo "testing/kube-fixtures matches $upstream ($(ls "$copy" | wc -l) files)"
