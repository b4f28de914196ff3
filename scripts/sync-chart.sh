#!/usr/bin/env bash
# Keeps the Helm chart the one source of truth for what Sluice installs:
#   - helm/sluice/crds/ becomes a copy of crds/ (Helm installs a chart's crds/ folder; a symlink would make
#     every helm command warn and breaks on systems without symlinks);
#   - deploy/operator/rbac.yaml and deployment.yaml are rendered from the chart (release `sluice` in
#     namespace sluice-system, default values) for `kubectl apply` without Helm.
# ctest helm_chart (helm/chart_test.py) fails when either is stale and names this script.
# Usage: scripts/sync-chart.sh [--check]   --check: change nothing, exit 1 if anything is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
HELM=${SLUICE_TOOLS_DIR:-$PWD/.tools}/bin/helm
[ -x "$HELM" ] || { echo "sync-chart.sh: $HELM is missing: run scripts/setup.sh" >&2; exit 1; }
check=0
[ "${1:-}" = "--check" ] && check=1

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/crds" "$out/deploy/operator"
cp crds/*.yaml "$out/crds/"
render() { "$HELM" template sluice helm/sluice --namespace sluice-system "${@/#/--show-only=templates/}"; }
{
  cat <<'HEAD'
# Rendered from the Helm chart helm/sluice by scripts/sync-chart.sh (release sluice, namespace sluice-system,
# default values): do not edit; change the chart and run the script. With Helm, prefer
#   helm install sluice helm/sluice -n sluice-system --create-namespace   (docs/install.md)
# Without Helm, apply the CRD first, then this file, then deployment.yaml:
#   kubectl apply -f crds/ -f deploy/operator/rbac.yaml -f deploy/operator/deployment.yaml
# e2e/test_operator_observability.py runs the real operator authorized by exactly these rules.
apiVersion: v1
kind: Namespace
metadata:
  name: sluice-system
HEAD
  render serviceaccount.yaml operator-rbac.yaml
} >"$out/deploy/operator/rbac.yaml"
{
  cat <<'HEAD'
# Rendered from the Helm chart helm/sluice by scripts/sync-chart.sh (release sluice, namespace sluice-system,
# default values): do not edit; change the chart and run the script. sluice-operator with two replicas and
# leader election, and the Service in front of its /metrics. The image is built by scripts/images.sh.
HEAD
  render operator-deployment.yaml metrics-service.yaml
} >"$out/deploy/operator/deployment.yaml"

stale=()
for f in crds/*.yaml; do
  cmp -s "$f" "helm/sluice/crds/$(basename "$f")" || stale+=("helm/sluice/crds/$(basename "$f")")
done
for f in helm/sluice/crds/*.yaml; do
  [ -f "crds/$(basename "$f")" ] || stale+=("$f (no crds/$(basename "$f"))")
done
for f in deploy/operator/rbac.yaml deploy/operator/deployment.yaml; do
  cmp -s "$out/$f" "$f" || stale+=("$f")
done
if [ ${#stale[@]} -eq 0 ]; then exit 0; fi
if [ $check -eq 1 ]; then
  echo "sync-chart.sh: stale: ${stale[*]} (run scripts/sync-chart.sh)" >&2
  exit 1
fi
rm -f helm/sluice/crds/*.yaml
cp "$out"/crds/*.yaml helm/sluice/crds/
cp "$out/deploy/operator/rbac.yaml" "$out/deploy/operator/deployment.yaml" deploy/operator/
echo "sync-chart.sh: updated ${stale[*]}" >&2
