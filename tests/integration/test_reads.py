"""Reads by inversion, in real launches as root and as a user (ADR 0011, check 72).

A project beside the workspace (under a top-level directory no list names), another
user's home, /root on a user's launch and /srv hold world-readable secrets; none is
there inside, while the system trees and allow-read are. allow-read of a home or
its dot entries is refused with one line.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest

from .conftest import TEST_USER, Launcher

pytestmark = pytest.mark.integration
WIDEN = "env-may-widen = egress-jail\n"  # the launcher's environment turns the jail off


@pytest.fixture
def planted(launcher: Launcher) -> Iterator[dict[str, str]]:
    """World-readable secrets where no list of names would look, and a workspace beside
    one of them; {what: path}."""
    tag = uuid.uuid4().hex[:8]
    top = f"/csbx-projects-{tag}"
    paths = {
        "sibling": f"{top}/other/.env",
        "srv": f"/srv/csbx-{tag}/secret",
        "other home": (f"/home/{TEST_USER}/csbx-{tag}" if launcher.user == "root"
                       else f"/root/csbx-{tag}"),
        "shared": f"/csbx-shared-{tag}/readme",  # shown through allow-read
    }
    for path in paths.values():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write("csbx-secret\n")
        os.chmod(path, 0o644)
    workspace = f"{top}/mine"
    os.makedirs(workspace)
    for directory in (top, workspace, os.path.dirname(paths["sibling"])):
        os.chmod(directory, 0o755)
    os.chown(workspace, launcher.uid, launcher.uid)
    os.chmod("/root", 0o755)  # readable by anyone outside: the sandbox must still hide it
    try:
        yield {**paths, "workspace": workspace, "top": top}
    finally:
        os.chmod("/root", 0o700)
        for path in (top, os.path.dirname(paths["srv"]), os.path.dirname(paths["shared"])):
            shutil.rmtree(path, ignore_errors=True)
        os.unlink(paths["other home"])


def test_only_the_system_trees_the_workspace_and_allow_read_are_there(
        launcher: Launcher, planted: dict[str, str]) -> None:
    shared = os.path.dirname(planted["shared"])
    script = ("top=$1; shift; for p in \"$@\"; do if cat \"$p\" >/dev/null 2>&1; then "
              "echo \"read $p\"; else echo \"gone $p\"; fi; done; ls -a \"$top\"; "
              "cat /etc/hostname >/dev/null && echo etc-ok")
    targets = [planted[k] for k in ("sibling", "srv", "other home", "shared")]
    result = launcher.shell("/bin/sh", "-c", script, "sh", planted["top"], *targets,
                            cwd=planted["workspace"], config=f"allow-read = {shared}\n{WIDEN}")
    assert result.returncode == 0, result.stderr
    out = result.stdout.split()
    for what in ("sibling", "srv", "other home"):
        assert f"gone {planted[what]}" in result.stdout, (what, result.stdout)
    assert f"read {planted['shared']}" in result.stdout, result.stdout
    assert "etc-ok" in out
    # The workspace's parent holds only the way to the workspace.
    listing = result.stdout.split("\n")
    assert "other" not in listing and "mine" in listing, result.stdout


def test_allow_read_of_a_home_or_its_dot_entries_is_refused(launcher: Launcher) -> None:
    for path in (launcher.home, os.path.join(launcher.home, ".ssh"), "/"):
        result = launcher.shell("/bin/true", config=f"allow-read = {path}\n{WIDEN}")
        assert result.returncode == 78, (path, result.stderr)
        lines = [line for line in result.stderr.splitlines() if "warning" not in line]
        assert len(lines) == 1 and "allow-read" in lines[0], result.stderr
