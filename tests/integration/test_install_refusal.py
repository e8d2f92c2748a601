"""The installer refuses, in one line, where user namespaces do not work."""

from __future__ import annotations

import os
import subprocess

import pytest

pytestmark = pytest.mark.integration
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_install_refuses_without_user_namespaces() -> None:
    # A throw-away user namespace whose own limit on nested namespaces is 0.
    script = (
        "echo 0 > /proc/sys/user/max_user_namespaces && "
        "exec /usr/bin/python3 -m claude_sandbox.install.installer --check --no-apt --no-tools"
    )
    result = subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c", script],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        line for line in result.stderr.strip().splitlines() if line.startswith("claude-sandbox")
    ]
    assert "refusing to install: user namespaces do not work" in result.stderr
    assert "user.max_user_namespaces is 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_writes_nothing_and_a_second_install_changes_nothing() -> None:
    result = subprocess.run([f"{REPO}/install.sh", "--no-apt", "--check"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("nothing to change"), result.stdout
