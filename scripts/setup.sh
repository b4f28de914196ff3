#!/usr/bin/env bash
# Installs every dependency Sluice needs from Debian packages. Idempotent and quiet
# when everything is already present. Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcpprest-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev prometheus-cpp-dev
  libabsl-dev catch2 libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
  libzstd-dev liblz4-dev pybind11-dev python3-pybind11 python3-dev libcli11-dev
  python3-numpy python3-pytest python3-torch python3-torchvision python3-pil
  zlib1g-dev python3-yaml python3-requests libcivetweb-dev lomiri-wallpapers-16.04
  dataset-fashion-mnist prometheus openssl python3-matplotlib
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
