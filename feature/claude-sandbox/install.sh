#!/bin/bash
# The claude-sandbox dev-container Feature: runs the repository's own installer
# (carried in payload/, see feature/build.sh) as root during the image build,
# then writes the Feature's options into /etc/claude-sandbox.conf.
# Options arrive as environment variables (dev container Features convention):
# AGENTS, CLAUDECODEVERSION, CODEXVERSION, PIVERSION, EGRESSJAIL, EXTRACONFIG.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
payload="$here/payload"
conf=/etc/claude-sandbox.conf
begin="# >>> claude-sandbox Feature options (rewritten on each Feature install)"
end="# <<< claude-sandbox Feature options"

die() { echo "claude-sandbox feature: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (dev container Features do)"
[ -x "$payload/install.sh" ] || die "no payload/ beside install.sh: build the Feature with feature/build.sh"
[ -r /etc/debian_version ] || die "only Debian and Ubuntu bases are supported"

agents="${AGENTS-claude,codex,pi}"
agents="${agents// /}"
if [ -n "$agents" ]; then
  # pi and codex's launcher need Node >= 20.6; say so before npm fails obscurely.
  node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
  [ "$node_major" -ge 20 ] || die "agents need Node.js >= 20 (found: ${node_major}); add the node Feature or use a Node 20 base"
fi

# The image keeps no download: npm's cache goes to a directory removed after the
# install, pip keeps none, and apt's lists and archives are cleaned at the end.
npm_cache="$(mktemp -d /tmp/claude-sandbox-feature-npm.XXXXXX)"
trap 'rm -rf "$npm_cache"' EXIT
export npm_config_cache="$npm_cache" PIP_NO_CACHE_DIR=1

# The build sandbox is not where the container will run: the user-namespace
# probe is left to `claude-sandbox doctor` at run time.
"$payload/install.sh" --no-host-check --agents "$agents" \
  --agent-versions "claude=${CLAUDECODEVERSION:-latest},codex=${CODEXVERSION:-latest},pi=${PIVERSION:-latest}"

# Our block, replaced in place: a second install changes nothing, and the
# operator's own lines around it are kept.
block="$begin"$'\n'
case "${EGRESSJAIL:-true}" in
  false|0|no) block+="egress-jail = 0"$'\n' ;;
  true|1|yes) ;;
  *) die "egressJail must be true or false, not ${EGRESSJAIL}" ;;
esac
if [ -n "${EXTRACONFIG:-}" ]; then
  IFS=';' read -r -a lines <<< "$EXTRACONFIG"
  for line in "${lines[@]}"; do
    line="$(echo "$line" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')"
    [ -n "$line" ] && block+="$line"$'\n'
  done
fi
block+="$end"
current="$(cat "$conf" 2>/dev/null || true)"
rest="$(printf '%s\n' "$current" | sed "/^$begin\$/,/^$end\$/d")"
wanted="$(printf '%s\n%s\n' "$rest" "$block")"
if [ "$wanted" != "$current" ]; then
  tmp="$(mktemp /etc/.claude-sandbox.conf.XXXXXX)"
  printf '%s\n' "$wanted" > "$tmp"
  chmod 0644 "$tmp"
  chown 0:0 "$tmp"
  mv -f "$tmp" "$conf"
  echo "  changed    $conf (Feature options)"
else
  echo "  unchanged  $conf (Feature options)"
fi

# A bad extraConfig line would refuse every launch; fail the build now instead.
# `explain` reads the configuration exactly as a launch does; it runs from a
# scratch directory because the build's own cwd may be /, which it refuses as a workspace.
scratch="$(mktemp -d)"
if ! (cd "$scratch" && /usr/local/bin/claude-sandbox explain --agent claude >/dev/null); then
  rmdir "$scratch"
  die "the configuration in $conf is invalid (see the message above)"
fi
rmdir "$scratch"

install -d -m 0700 /var/tmp/claude-agent

apt-get clean
rm -rf /var/lib/apt/lists/*
