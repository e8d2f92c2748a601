"""An install that would write outside the workspace says why, once a session, in a real
sandbox, and the package manager itself still runs and answers (install/hints.py)."""

from __future__ import annotations

import shutil

import pytest

from tests.integration.conftest import Launcher

HINT = "claude-sandbox: outside the workspace is read-only in this sandbox, so `apt-get`"
MARK = "claude-sandbox: outside the workspace is read-only"


@pytest.mark.skipif(shutil.which("apt-get") is None or shutil.which("dpkg") is None,
                    reason="a Debian-family machine's apt-get and dpkg")
def test_apt_get_install_names_the_read_only_place_once(launcher: Launcher) -> None:
    script = ("apt-get install -y csbx-no-such-package; echo \"apt-get: $?\"; "
              "dpkg -i /nonexistent.deb; echo \"dpkg: $?\"; "
              "apt-get --version >/dev/null; echo \"version: $?\"")
    result = launcher.shell("sh", "-c", script)
    assert result.returncode == 0, result.stderr
    # apt-get's and dpkg's own refusals (the read-only system), after one line from us.
    assert "apt-get: 100" in result.stdout and "version: 0" in result.stdout
    assert "dpkg: 0" not in result.stdout
    assert result.stderr.count(MARK) == 1, result.stderr
    assert result.stderr.index(HINT) < result.stderr.index("E: ")
    assert MARK not in result.stdout


def test_installs_inside_the_workspace_get_no_hint(launcher: Launcher) -> None:
    result = launcher.shell("sh", "-c", "apt-get --help >/dev/null; dpkg -l >/dev/null; "
                            "touch made-here && echo ok")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert MARK not in result.stderr
