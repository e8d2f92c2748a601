"""Repositories the session made or changed without an overlay, from the scan to the check.

What git outside would run is planted as an agent in a live workspace plants it; git
itself confirms, before, that it would read the plant and, after, that it no longer
runs the payload.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import TYPE_CHECKING

from claude_sandbox.launch.overlay import aftermath, gitcheck, gitsession

if TYPE_CHECKING:
    from pathlib import Path

PAYLOAD = "touch {marker}; false"


def later() -> int:
    """A `since_ns` after everything made so far and before everything made next (file
    times lag time_ns() by up to a tick of the kernel's coarse clock)."""
    time.sleep(0.03)
    since = time.time_ns()
    time.sleep(0.03)
    return since


def git(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CEILING_DIRECTORIES": str(tmp_path),
           "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}
    return subprocess.run(["git", *args], env=env, capture_output=True, text=True,
                          check=False)


def repository(tmp_path: Path, where: Path) -> Path:
    assert git(tmp_path, "init", "-q", str(where)).returncode == 0
    (where / "f").write_text("x\n")
    assert git(tmp_path, "-C", str(where), "add", "f").returncode == 0
    assert git(tmp_path, "-C", str(where), "commit", "-qm", "i").returncode == 0
    return where / ".git"


def after_the_session(workspace: Path, since: int, store: Path) -> gitcheck.Quarantine:
    """What the session's end does with a live workspace's repositories (steps.py)."""
    quarantine = gitcheck.Quarantine(str(store))
    found = aftermath.scan([str(workspace)], since, frozenset({".git"}))
    gitsession.check_made([str(workspace / f.path) for f in found if f.kind == "git"],
                          str(workspace), [], since, quarantine)
    return quarantine


def test_a_bare_plant_with_a_linked_head_is_found_and_stripped(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "main.c").write_text("int main;\n")
    since = later()
    plant, marker = workspace / "src", tmp_path / "ran"
    (plant / "objects").mkdir()
    (plant / "refs").mkdir()
    (plant / "HEAD").symlink_to("refs/heads/main")
    (plant / "config").write_text(
        "[core]\n\tbare = false\n\tworktree = .\n"
        f"\tfsmonitor = \"{PAYLOAD.format(marker=marker)}\"\n")
    assert git(tmp_path, "-C", str(plant), "rev-parse", "--git-dir").stdout.strip() == "."
    quarantine = after_the_session(workspace, since, tmp_path / "store")
    assert any("core.fsmonitor" in line for line in quarantine.lines)
    assert "fsmonitor" not in (plant / "config").read_text()
    git(tmp_path, "-C", str(plant), "status")
    assert not marker.exists()


def test_a_worktree_config_is_stripped_as_config_is(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    dotgit = repository(tmp_path, workspace / "sub")
    since = later()
    marker = tmp_path / "ran"
    for key in ("core.repositoryformatversion 1", "extensions.worktreeConfig true"):
        git(tmp_path, "-C", str(workspace / "sub"), "config", *key.split())
    (dotgit / "config.worktree").write_text(
        f"[core]\n\tfsmonitor = \"{PAYLOAD.format(marker=marker)}\"\n")
    assert "touch" in git(tmp_path, "-C", str(workspace / "sub"), "config",
                          "core.fsmonitor").stdout
    quarantine = after_the_session(workspace, since, tmp_path / "store")
    assert any("config.worktree" in line for line in quarantine.lines)
    assert git(tmp_path, "-C", str(workspace / "sub"), "config", "core.fsmonitor").stdout == ""
    git(tmp_path, "-C", str(workspace / "sub"), "status")
    assert not marker.exists()


def test_submodules_and_linked_worktrees_at_any_depth_are_stripped(tmp_path: Path) -> None:
    dotgit = tmp_path / "sub" / ".git"
    old_hook = dotgit / "modules" / "a" / "b" / "hooks" / "pre-commit"
    old_hook.parent.mkdir(parents=True)
    old_hook.write_text("#!/bin/sh\n")  # the user's, untouched
    since = later()
    evil = "[core]\n\tbare = false\n\tfsmonitor = evil\n"
    configs = [dotgit / "modules" / "lib" / "config",  # a config alone marks it
               dotgit / "modules" / "a" / "b" / "config",  # a name with a slash
               dotgit / "modules" / "a" / "b" / "modules" / "c" / "config.worktree",
               dotgit / "worktrees" / "wt" / "config.worktree",
               dotgit / "modules" / "lib" / "worktrees" / "w2" / "config.worktree"]
    for config in configs:
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(evil)
    hook = dotgit / "modules" / "a" / "b" / "modules" / "c" / "hooks" / "post-checkout"
    hook.parent.mkdir(parents=True)
    hook.write_text("#!/bin/sh\nevil\n")
    # Neither a hook nor a config git would read: left where they are.
    (dotgit / "modules" / "lib" / "hooks" / "pre-push.d").mkdir(parents=True)
    (dotgit / "worktrees" / "w3" / "config.worktree").mkdir(parents=True)
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    gitsession.strip_made(str(dotgit), since, quarantine)
    for config in configs:
        assert config.read_text() == "[core]\n\tbare = false\n", config
    assert not hook.exists() and old_hook.exists()
    assert len(quarantine.lines) == len(configs) + 1


def test_a_hook_rewritten_in_place_is_found_and_taken(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    dotgit = repository(tmp_path, workspace / "sub")
    hook = dotgit / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    (dotgit / "hooks" / "post-merge").write_text("#!/bin/sh\n")
    since = later()
    with open(hook, "w", encoding="utf-8") as rewritten:  # the same inode
        rewritten.write("#!/bin/sh\nevil\n")
    assert os.lstat(dotgit / "hooks").st_ctime_ns < since
    assert os.lstat(dotgit).st_ctime_ns < since
    quarantine = after_the_session(workspace, since, tmp_path / "store")
    assert not hook.exists()
    assert (dotgit / "hooks" / "post-merge").exists()
    assert [line for line in quarantine.lines if "hook" in line]


def test_a_config_too_long_to_read_is_not_taken_as_empty(tmp_path: Path) -> None:
    dotgit = tmp_path / "sub" / ".git"
    dotgit.mkdir(parents=True)
    since = later()
    (dotgit / "config").write_text(
        "[core]\n\tfsmonitor = evil\n" + "# padding\n" * (1 << 19))
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    gitsession.strip_made(str(dotgit), since, quarantine)
    assert "fsmonitor" not in (dotgit / "config").read_text()
    assert any("cannot be read" in line for line in quarantine.lines)
