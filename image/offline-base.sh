#!/bin/bash
# A Debian bookworm base image with Node >= 20, made without any container registry.
#
#   image/offline-base.sh            prints the image's name once it exists
#
# For machines that reach a Debian mirror and the npm registry but no container
# registry. debootstrap makes a minimal bookworm from the mirror apt already uses;
# Node comes from this machine: its installed nodejs package, repacked with
# dpkg-repack (Debian 12's own nodejs is 18, too old for the agents), and its npm
# copied beside it. The machine's apt sources, npm configuration and extra CA
# certificates go in too, so the image build fetches through the same mirrors.
# The tree and the image are cached: a second run costs nothing.
#
# Needs root, debootstrap, dpkg-repack, podman, and Node >= 20 installed as a package.
# Environment: BASE_TAG (default localhost/claude-sandbox-base:bookworm-node20),
# BASE_CACHE (default /var/cache/claude-sandbox-base).
set -euo pipefail
tag=${BASE_TAG:-localhost/claude-sandbox-base:bookworm-node20}
cache=${BASE_CACHE:-/var/cache/claude-sandbox-base}
say() { echo "image/offline-base.sh: $*" >&2; }

if podman image exists "$tag"; then
  echo "$tag"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { say "run as root (debootstrap and chroot need it)"; exit 1; }
for tool in debootstrap dpkg-repack podman; do
  command -v "$tool" >/dev/null || { say "$tool is missing: apt-get install $tool"; exit 1; }
done
major=$(dpkg-query -W -f '${Version}' nodejs 2>/dev/null | sed 's/^[0-9]*://; s/\..*//')
if [ -z "$major" ] || [ "$major" -lt 20 ]; then
  say "this machine has no nodejs package >= 20 to repack (found: ${major:-none})"
  exit 1
fi

# The Debian mirror apt already uses (deb822 or one-line sources), not the security one.
mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
  | grep -oE '(URIs:[[:space:]]*|^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[^[:space:]]+' \
  | awk '{print $NF}' | grep debian | grep -v security | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}

mkdir -p "$cache"
root=$cache/rootfs
if [ ! -e "$cache/rootfs.done" ]; then
  if [ ! -e "$cache/rootfs.debootstrapped" ]; then
    rm -rf "$root"
    say "debootstrap bookworm from $mirror"
    debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$root" "$mirror" \
      >"$cache/debootstrap.log" 2>&1 || { say "debootstrap failed: see $cache/debootstrap.log"; exit 1; }
    touch "$cache/rootfs.debootstrapped"
  fi
  mkdir -p "$cache/node"
  deb=$(ls "$cache"/node/nodejs_*.deb 2>/dev/null | tail -1 || true)
  if [ -z "$deb" ]; then
    (cd "$cache/node" && dpkg-repack nodejs >/dev/null)
    deb=$(ls "$cache"/node/nodejs_*.deb | tail -1)
  fi
  cp "$deb" "$root/tmp/"
  chroot "$root" dpkg -i "/tmp/$(basename "$deb")" >/dev/null
  rm -f "$root/tmp/$(basename "$deb")"
  # The machine's npm may have been upgraded in place, which a repack breaks: copy it.
  rm -rf "$root/usr/lib/node_modules/npm"
  cp -a /usr/lib/node_modules/npm "$root/usr/lib/node_modules/npm"
  ln -sfn ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/bin/npm"
  cp -a /etc/apt/sources.list.d/. "$root/etc/apt/sources.list.d/"
  [ -e /etc/apt/sources.list ] && cp /etc/apt/sources.list "$root/etc/apt/sources.list"
  # A TLS-intercepting egress proxy's CA, if this machine trusts one.
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
  chroot "$root" update-ca-certificates >/dev/null
  for npmrc in /etc/npmrc /usr/etc/npmrc; do
    if [ -e "$npmrc" ]; then
      mkdir -p "$root$(dirname "$npmrc")"
      cp "$npmrc" "$root$npmrc"
    fi
  done
  chroot "$root" apt-get clean
  touch "$cache/rootfs.done"
fi

# npm reads its cafile from PREFIX/etc/npmrc and the installer runs npm with its own
# --prefix, so an extra CA comes through node's variable. A tar import has no
# environment: give it the PATH a registry image has.
tar -C "$root" -c . | podman import \
  --change "ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt" \
  --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  - "$tag" >/dev/null
echo "$tag"
