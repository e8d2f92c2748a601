#!/bin/bash
# Build the claude-sandbox image from image/Dockerfile, with the agent versions pinned.
#
#   image/build.sh [--offline-base | --base IMAGE] [--tag TAG] [--engine podman|docker]
#                  [-- BUILD FLAGS...]
#
#   --offline-base  make the base here, with no container registry (image/offline-base.sh)
#   --base IMAGE    any Debian/Ubuntu image with Node >= 20
#                   (default: docker.io/library/node:20-bookworm-slim)
#   --tag TAG       the image's name (default: claude-sandbox:latest)
#   --engine        podman (default) or docker
#   -- FLAGS        passed to `ENGINE build` (for example --isolation chroot)
#
# Agent versions: CLAUDE_CODE_VERSION, CODEX_VERSION, PI_VERSION (default: the pins below,
# the versions the tests use); AGENTS (default claude,codex,pi).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
engine=podman
tag=claude-sandbox:latest
base=""
offline=0
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --offline-base) offline=1 ;;
    --base) base=${2:?--base needs an image}; shift ;;
    --tag) tag=${2:?--tag needs a name}; shift ;;
    --engine) engine=${2:?--engine needs podman or docker}; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "image/build.sh: unknown argument $1 (see --help)" >&2; exit 64 ;;
  esac
  shift
done
if [ "$offline" = 1 ]; then
  [ -z "$base" ] || { echo "image/build.sh: --offline-base and --base exclude each other" >&2; exit 64; }
  base=$("$repo/image/offline-base.sh")
fi
args=(
  --build-arg "CLAUDE_CODE_VERSION=${CLAUDE_CODE_VERSION:-2.1.197}"
  --build-arg "CODEX_VERSION=${CODEX_VERSION:-0.171.0}"
  --build-arg "PI_VERSION=${PI_VERSION:-0.73.1}"
  --build-arg "AGENTS=${AGENTS:-claude,codex,pi}"
)
[ -n "$base" ] && args+=(--build-arg "BASE_IMAGE=$base")
cd "$repo"
"$engine" build -f image/Dockerfile "${args[@]}" "$@" -t "$tag" .
echo "image/build.sh: built $tag ($("$engine" image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.2f GB", $1/1e9}'))"
