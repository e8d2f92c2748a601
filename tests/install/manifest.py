"""What an install placed, as one comparable text: paths, modes, owners and content hashes."""

from __future__ import annotations

# The parts both an image and a Feature install must agree on. The tools venv
# and the agents' node_modules are left out: pip and npm may resolve a
# dependency differently from one day to the next.
MANIFEST_SCRIPT = r"""
set -e
cd /
for path in usr/local/bin/claude usr/local/bin/codex usr/local/bin/pi \
            usr/local/bin/claude-sandbox etc/claude-code/managed-settings.json \
            etc/codex/managed_config.toml etc/claude-gitconfig; do
  printf '%s %s %s\n' "$path" "$(stat -c '%a %U' "$path")" "$(sha256sum < "$path" | cut -c1-16)"
done
site=$(ls -d usr/libexec/claude-sandbox/venv/lib/python3*/site-packages)
find "$site" usr/libexec/claude-sandbox/hooks usr/libexec/claude-sandbox/verification \
     usr/libexec/claude-sandbox/inside \
     -type f ! -name '*.pyc' -printf '%p %m %u\n' | sort | while read -r p m u; do
  printf '%s %s %s %s\n' "$p" "$m" "$u" "$(sha256sum < "$p" | cut -c1-16)"
done
ls usr/libexec/claude-sandbox/real
"""
