#!/bin/bash
# Install claude-sandbox on a Debian/Ubuntu dev container, as root.
#   ./install.sh [--agents claude,codex,pi] [--check] [uninstall]
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv' 2>/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv
fi
exec /usr/bin/python3 -m claude_sandbox.install.installer "$@"
