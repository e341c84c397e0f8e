#!/usr/bin/env bash
# Print the base image to build the swarm image FROM, making one if needed.
#
# With a registry: python:3.11-slim-bookworm (pulled once). Without one (no
# registry reachable, as on our machines): a Debian bookworm root made with
# debootstrap from the Debian mirror and imported as swarm-base:bookworm.
# Progress goes to stderr; the image name is the only thing on stdout.
set -euo pipefail

LOCAL=swarm-base:bookworm
REMOTE=${BASE_IMAGE:-python:3.11-slim-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-venv,iproute2,iptables,libgmp10,libgomp1,faketime,procps

have() { docker image inspect "$1" >/dev/null 2>&1; }

if have "$LOCAL"; then echo "$LOCAL"; exit 0; fi
if have "$REMOTE"; then echo "$REMOTE"; exit 0; fi
if timeout 60 docker pull -q "$REMOTE" >/dev/null 2>&1; then echo "$REMOTE"; exit 0; fi

echo "base image: no registry answers; building $LOCAL with debootstrap (about a minute)" >&2
if ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  else
    echo "debootstrap is needed to build a base image without a registry: apt-get install debootstrap" >&2
    exit 2
  fi
fi
root=$(mktemp -d /tmp/swarm-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$root" "$MIRROR" >&2
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$LOCAL" >/dev/null
echo "base image: $LOCAL ready" >&2
echo "$LOCAL"
