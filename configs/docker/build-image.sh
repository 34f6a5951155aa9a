#!/usr/bin/env bash
# Builds the `cairn` runtime image without a container registry.
#
#   configs/docker/build-image.sh [path/to/cairn]     (default: the workspace's release binary)
#
# 1. Base image `cairn-base:<suite>-<hash>`: a minimal Debian made by `debootstrap --variant=minbase`
#    from the apt mirror this machine is already configured with (read from its apt sources,
#    never hard-coded), with the shared libraries `cairn` links (OpenBLAS, LAPACK, OpenMP,
#    gfortran), then `docker import`ed. Built once: later runs find it and take seconds.
# 2. Runtime image `cairn:local`: the base plus the host-built release binary, a non-root
#    user, a health check on /readyz (`cairn health`), data in /data. Same layout as the
#    registry-based `configs/Dockerfile`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

binary="${1:-}"
if [ -z "$binary" ]; then
  target_dir="${CARGO_TARGET_DIR:-$repo/target}"
  binary="$target_dir/release/cairn"
fi
[ -x "$binary" ] || { echo "build-image: no cairn binary at $binary (cargo build --release first)" >&2; exit 1; }

# The suite and mirror of this machine's own apt configuration.
. /etc/os-release
suite="${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}"
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  # deb822: the first URIs line of a stanza for the main archive (not -security).
  mirror=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i !~ /security/) {print $i; exit}}' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
fi
[ -n "$mirror" ] || { echo "build-image: cannot find an apt mirror in /etc/apt" >&2; exit 1; }

packages="libopenblas0-pthread,liblapack3,libblas3,libgomp1,libgfortran5,libstdc++6"
base_tag="cairn-base:${suite}-$(printf '%s %s' "$mirror" "$packages" | sha256sum | cut -c1-12)"

if docker image inspect "$base_tag" >/dev/null 2>&1; then
  echo "build-image: reusing $base_tag"
else
  if ! command -v debootstrap >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  fi
  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  echo "build-image: debootstrap $suite from $mirror into $rootfs"
  debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >/dev/null
  # Smaller image: no apt lists, caches or docs are needed at run time.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  tar -C "$rootfs" -c . | docker import - "$base_tag" >/dev/null
  echo "build-image: built $base_tag"
fi

context=$(mktemp -d)
trap 'rm -rf "$context" ${rootfs:+"$rootfs"}' EXIT
# The release profile keeps line tables for backtraces; the image does not need them.
objcopy --strip-debug "$binary" "$context/cairn" 2>/dev/null || cp "$binary" "$context/cairn"
cp "$repo/configs/standalone.toml" "$context/standalone.toml"
sed "s|^FROM .*|FROM $base_tag|" "$here/Dockerfile.runtime" > "$context/Dockerfile"
# Without buildx the legacy builder is used; it resolves the FROM image locally, as needed here.
docker build -q -t cairn:local "$context" >/dev/null 2> >(grep -v -e DEPRECATED -e "legacy builder" -e buildx -e "^ *$" >&2)
echo "build-image: built cairn:local on $base_tag"
