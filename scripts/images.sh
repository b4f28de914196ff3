#!/usr/bin/env bash
# Builds Sluice's container image from the binaries in build/bin with Debian's podman, mmdebstrap and runc;
# nothing is pulled from a registry. scripts/setup.sh installs the tools.
#   1. base: mmdebstrap --variant=essential (merged-usr, no man/locale/doc/info) with the runtime libraries of
#      worker-image/runtime-packages.txt, cut down to them by worker-image/minimize_rootfs.py (no shell, no
#      coreutils, no dpkg) plus a `sluice` user (UID/GID 65532), imported as localhost/sluice-base:<key>.
#      The key hashes the package list and this recipe: an existing base with that key is reused.
#   2. image: worker-image/Containerfile FROM the base (--pull=never) with sluice, sluice-dispatcher,
#      sluice-worker, sluice-operator and, when built, sluice-autoscaler; OCI labels with the project
#      version and the git revision; tagged localhost/sluice:<version> (SLUICE_IMAGE_TAG overrides the tag).
#   3. build/images/sluice-<tag>.oci.tar (podman save --format oci-archive), rewritten only when the image
#      changed; build/images/image.env names the image for the tests and the chart.
# Podman reads worker-image/containers.conf (runc, explicit ulimits) through CONTAINERS_CONF; /etc is not
# touched. Runs as root (podman's rootful storage). Concurrent runs on one build directory wait (flock).
# Usage: scripts/images.sh        Prints the image name, its size and the time each step took.
# Environment: SLUICE_BUILD_DIR (default build), SLUICE_IMAGE_TAG (default: the project version),
#   SLUICE_REBUILD_BASE=1 (build the base again although one with its key exists: e.g. to take Debian
#   security updates, which do not change the key).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
BIN=$BUILD_DIR/bin
OUT=$(realpath -m "$BUILD_DIR/images")
export CONTAINERS_CONF=$REPO/worker-image/containers.conf

die() { echo "images.sh: $*" >&2; exit 1; }
for tool in podman mmdebstrap runc /usr/bin/python3; do
  command -v "$tool" >/dev/null || die "$tool is missing: run scripts/setup.sh (it installs podman, mmdebstrap and runc)"
done
[ "$(id -u)" -eq 0 ] || die "run as root (podman's rootful storage and mmdebstrap's root mode)"

PROGRAMS=(sluice sluice-dispatcher sluice-worker sluice-operator)
[ -x "$BIN/sluice-autoscaler" ] && PROGRAMS+=(sluice-autoscaler)
for p in "${PROGRAMS[@]}"; do
  [ -x "$BIN/$p" ] || die "$BIN/$p is missing: build it first (scripts/build.sh ${PROGRAMS[*]})"
done

mkdir -p "$OUT"
exec 8>"$OUT/.lock"
flock 8

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

PACKAGE_LIST=${SLUICE_RUNTIME_PACKAGES:-worker-image/runtime-packages.txt}  # override: tests only
mapfile -t PACKAGES < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$PACKAGE_LIST" | grep -v '^$' | sort -u)

# Every shared library the programs load must come from a package of the list (or the list's dependencies,
# which the base keeps too, but naming them keeps the list honest).
needed=$(ldd "${PROGRAMS[@]/#/$BIN/}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
[ -n "$needed" ] || die "ldd found no shared libraries in ${PROGRAMS[*]}: are they dynamically linked ELF files?"
declare -A owner_of=()  # real path -> package (one dpkg -S for all: it reads every file list)
mapfile -t reals < <(while read -r lib; do readlink -f "$lib"; done <<<"$needed" | sort -u)
while IFS= read -r line; do
  pkg=${line%%:*}; path=${line#*: }
  owner_of[$path]=$pkg; owner_of[${path/#\/lib\//\/usr\/lib\/}]=$pkg
done < <(dpkg -S "${reals[@]}" "${reals[@]/#\/usr\/lib\//\/lib\/}" 2>/dev/null || true)
declare -A listed=()
for p in "${PACKAGES[@]}"; do listed[$p]=1; done
missing=()
for real in "${reals[@]}"; do
  pkg=${owner_of[$real]:-}
  [ -n "$pkg" ] || die "no Debian package owns $real (needed by ${PROGRAMS[*]}): the image can only hold packaged libraries"
  [ -n "${listed[$pkg]:-}" ] || missing+=("$pkg ($real)")
done
[ ${#missing[@]} -eq 0 ] || die "add to worker-image/runtime-packages.txt: ${missing[*]}"

# 1. The base, keyed on its package list and recipe.
SUITE=bookworm
MIRRORS=("deb http://deb.debian.org/debian $SUITE main"
         "deb http://deb.debian.org/debian $SUITE-updates main"
         "deb http://deb.debian.org/debian-security $SUITE-security main")
MMDEBSTRAP_ARGS=(--variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/info/*'
  "--include=$(IFS=,; echo "${PACKAGES[*]},ca-certificates")")
key=$( { printf '%s\n' "$SUITE" "${MIRRORS[@]}" "${MMDEBSTRAP_ARGS[@]}" "${PACKAGES[@]}"; cat worker-image/minimize_rootfs.py; } \
      | sha256sum | cut -c1-16)
BASE=localhost/sluice-base:$key
if podman image exists "$BASE" && [ "${SLUICE_REBUILD_BASE:-0}" != 1 ]; then
  echo "images.sh: reusing base $BASE" >&2
else
  t=$(now)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-base.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # ca-certificates is installed for its generated bundle (/etc/ssl/certs/ca-certificates.crt), which stays;
  # the package itself (and openssl, debconf and perl with it) is cut away with everything else not listed.
  if ! mmdebstrap "${MMDEBSTRAP_ARGS[@]}" \
      --customize-hook="/usr/bin/python3 $REPO/worker-image/minimize_rootfs.py \"\$1\" --user sluice:65532 ${PACKAGES[*]}" \
      "$SUITE" "$tmp/base.tar" "${MIRRORS[@]}" >"$tmp/mmdebstrap.log" 2>&1; then
    tail -n 30 "$tmp/mmdebstrap.log" >&2
    die "mmdebstrap failed (log above; it needs the Debian mirror)"
  fi
  podman import --quiet --change 'USER=65532:65532' "$tmp/base.tar" "$BASE" >/dev/null
  echo "images.sh: built base $BASE in $(elapsed "$t") s ($(du -m "$tmp/base.tar" | cut -f1) MiB)" >&2
  rm -rf "$tmp"
  trap - EXIT
fi

# 2. The image.
VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD_DIR/CMakeCache.txt")
[ -n "$VERSION" ] || die "no CMAKE_PROJECT_VERSION in $BUILD_DIR/CMakeCache.txt: configure the build first (scripts/build.sh)"
TAG=${SLUICE_IMAGE_TAG:-$VERSION}
IMAGE=localhost/sluice:$TAG
REVISION=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$REVISION" != unknown ] && ! git -C "$REPO" diff --quiet HEAD -- 2>/dev/null; then REVISION=$REVISION-dirty; fi
EPOCH=$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || date +%s)
CREATED=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)

t=$(now)
context=$OUT/context
rm -rf "$context"
mkdir -p "$context/bin"
for p in "${PROGRAMS[@]}"; do install -m 0755 "$BIN/$p" "$context/bin/$p"; done
# --no-cache: buildah 1.28 reuses a cached LABEL step whose build-arg (the revision) changed, leaving the
# old revision on the image; the binaries' layer is 13 MiB, so building it again costs about 2 s.
previous=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
podman build --quiet --pull=never --no-cache --format oci --timestamp "$EPOCH" \
  --build-arg "BASE=$BASE" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" \
  --build-arg "CREATED=$CREATED" -f worker-image/Containerfile -t "$IMAGE" "$context" >/dev/null
id=$(podman image inspect --format '{{.Id}}' "$IMAGE")
echo "images.sh: built $IMAGE (${PROGRAMS[*]}) in $(elapsed "$t") s" >&2
# The image this tag named before, now untagged, is removed (not if a container still uses it).
if [ -n "$previous" ] && [ "$previous" != "$id" ] \
    && [ -z "$(podman image inspect --format '{{join .RepoTags ","}}' "$previous" 2>/dev/null)" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi

# 3. The OCI archive, only when the image changed.
archive=$OUT/sluice-$TAG.oci.tar
if [ ! -f "$archive" ] || [ "$(cat "$OUT/.saved-id" 2>/dev/null)" != "$id" ]; then
  t=$(now)
  rm -f "$archive"
  podman save --quiet --format oci-archive -o "$archive" "$IMAGE"
  echo "$id" >"$OUT/.saved-id"
  echo "images.sh: saved $archive in $(elapsed "$t") s" >&2
fi
cat >"$OUT/image.env" <<EOF
SLUICE_IMAGE=$IMAGE
SLUICE_IMAGE_ID=$id
SLUICE_IMAGE_ARCHIVE=$archive
SLUICE_IMAGE_PROGRAMS="${PROGRAMS[*]}"
SLUICE_IMAGE_BASE=$BASE
EOF
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo "images.sh: $IMAGE ${id:0:12} $((size / 1048576)) MiB; archive $archive" >&2
