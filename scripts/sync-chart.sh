#!/usr/bin/env bash
# Keeps the Helm chart the one source of truth for what Sluice installs:
#   - helm/sluice/crds/ becomes a copy of crds/ (Helm installs a chart's crds/ folder; a symlink would make
#     every helm command warn and breaks on systems without symlinks);
#   - deploy/operator/rbac.yaml and deployment.yaml are rendered from the chart (release `sluice` in
#     namespace sluice-system, default values) for `kubectl apply` without Helm;
#   - deploy/autoscaler/rbac.yaml and deployment.yaml likewise, with autoscaler.enabled=true (only the
#     autoscaler's objects: its ServiceAccount, least-privilege rules, Deployment and metrics Service).
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
mkdir -p "$out/crds" "$out/deploy/operator" "$out/deploy/autoscaler"
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
# The autoscaler's documents only (the shared templates also render the operator's).
render_autoscaler() { "$HELM" template sluice helm/sluice --namespace sluice-system --set autoscaler.enabled=true \
  "${@/#/--show-only=templates/}" | awk 'BEGIN { RS = "---\n" }
    index($0, "\n  name: sluice-autoscaler") && index($0, "app.kubernetes.io/component: operator") == 0 { printf "---\n%s", $0 }'; }
{
  cat <<'HEAD'
# Rendered from the Helm chart helm/sluice by scripts/sync-chart.sh (release sluice, namespace sluice-system,
# default values and autoscaler.enabled=true): do not edit; change the chart and run the script. With Helm, prefer
#   helm install sluice helm/sluice -n sluice-system --create-namespace --set autoscaler.enabled=true
# Without Helm, after deploy/operator/ (the CRD, the namespace and the operator), apply this file, then deployment.yaml:
#   kubectl apply -f deploy/autoscaler/rbac.yaml -f deploy/autoscaler/deployment.yaml
# Least privilege (helm/rbac-usage.yaml names the code behind every rule); e2e/test_autoscaler.py runs the real
# autoscaler authorized by exactly these rules.
apiVersion: v1
kind: Namespace
metadata:
  name: sluice-system
HEAD
  render_autoscaler serviceaccount.yaml autoscaler-rbac.yaml
} >"$out/deploy/autoscaler/rbac.yaml"
{
  cat <<'HEAD'
# Rendered from the Helm chart helm/sluice by scripts/sync-chart.sh (release sluice, namespace sluice-system,
# default values and autoscaler.enabled=true): do not edit; change the chart and run the script. sluice-autoscaler
# with two replicas and leader election, scraping the dispatchers directly (set --prometheus-url, or the chart's
# prometheus.url, to query Prometheus), and the Service in front of its /metrics. docs/autoscaling.md.
HEAD
  render_autoscaler autoscaler-deployment.yaml metrics-service.yaml
} >"$out/deploy/autoscaler/deployment.yaml"

stale=()
for f in crds/*.yaml; do
  cmp -s "$f" "helm/sluice/crds/$(basename "$f")" || stale+=("helm/sluice/crds/$(basename "$f")")
done
for f in helm/sluice/crds/*.yaml; do
  [ -f "crds/$(basename "$f")" ] || stale+=("$f (no crds/$(basename "$f"))")
done
for f in deploy/operator/rbac.yaml deploy/operator/deployment.yaml deploy/autoscaler/rbac.yaml deploy/autoscaler/deployment.yaml; do
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
mkdir -p deploy/autoscaler
cp "$out/deploy/autoscaler/rbac.yaml" "$out/deploy/autoscaler/deployment.yaml" deploy/autoscaler/
echo "sync-chart.sh: updated ${stale[*]}" >&2
