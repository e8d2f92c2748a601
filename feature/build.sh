#!/bin/bash
# Assemble the publishable Feature: feature/claude-sandbox/ plus payload/, a copy
# of the repository's installer and package (the Feature is distributed as its own
# directory, an OCI artifact, so it must carry what it installs).
#   feature/build.sh [OUTDIR]     (default: feature/dist/claude-sandbox)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$repo/feature/dist/claude-sandbox}"
rm -rf "$out"
mkdir -p "$out/payload"
cp "$repo/feature/claude-sandbox/devcontainer-feature.json" "$repo/feature/claude-sandbox/install.sh" "$out/"
cp "$repo/install.sh" "$repo/pyproject.toml" "$out/payload/"
# Sources only: no caches, no build metadata.
tar -C "$repo" --exclude=__pycache__ --exclude='*.pyc' --exclude=.pytest_cache \
  -cf - claude_sandbox verification | tar -C "$out/payload" -xf -
chmod -R u=rwX,go=rX "$out"
echo "$out"
