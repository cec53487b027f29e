#!/usr/bin/env bash
# Makes the base image the Dockerfile names, planfiles-base:bookworm, from Debian's packages
# (debootstrap, then docker import), for machines that reach Debian's mirror but no image
# registry. Elsewhere `docker build --build-arg BASE=debian:bookworm-slim` with the packages
# below installed does the same. Run as root; needs debootstrap and a running dockerd.
#   scripts/docker-base.sh [MIRROR]
set -euo pipefail
mirror=${1:-http://deb.debian.org/debian}
name=planfiles-base:bookworm
if docker image inspect "$name" > /dev/null 2>&1; then
  echo "$name is there"
  exit 0
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
# git: the service spawns it (clones, pushes, repacks, fsck); curl: the health check;
# ca-certificates: https webhooks.
debootstrap --variant=minbase --include=git,ca-certificates,curl bookworm "$root" "$mirror" > /dev/null
# What a server needs none of: documentation, manuals, locales, apt's lists and caches.
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/locale/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*
tar -C "$root" -c . | docker import - "$name" > /dev/null
docker image inspect "$name" --format "$name: {{.Size}} bytes"
