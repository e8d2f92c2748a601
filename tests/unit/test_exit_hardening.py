"""The session-end checks against what the agent can still do to them: swap a link in
for a directory being opened, hide a repository in a control directory, and make one
repository uncheckable to stop the rest."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from claude_sandbox.launch.overlay import aftermath, gitcheck, gitmade, gitrepo
from tests.unit.test_gitindex import git


def test_add_mode_changes_a_directory_and_never_a_links_target(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o300)
    os.chmod(secret, 0o300)
    link = tmp_path / "link"
    link.symlink_to(secret)
    assert gitrepo.add_mode(str(link), 0o500) is None
    assert stat.S_IMODE(secret.stat().st_mode) == 0o300
    assert gitrepo.add_mode(str(secret), 0o500) == 0o300
    assert stat.S_IMODE(secret.stat().st_mode) == 0o700
    assert gitrepo.add_mode(str(secret), 0o500) is None  # it has them already


def test_a_repository_inside_a_control_directory_is_a_git_finding(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    nested = workspace / "docs" / ".vscode" / "x"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    found = aftermath.scan([str(workspace)], 0, frozenset({".vscode"}))
    kinds = {(f.path, f.kind) for f in found}
    assert ("docs/.vscode/x/.git", "git") in kinds, kinds
    assert ("docs/.vscode", "control") in kinds, kinds


def test_one_uncheckable_repository_is_named_and_the_others_still_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "ws"
    repos = [workspace / "a", workspace / "b"]
    for repo in repos:
        repo.mkdir(parents=True)
        git(repo, "init", "-q")
        hook = repo / ".git" / "hooks" / "pre-commit"
        hook.write_text("#!/bin/sh\n")
    taken = gitcheck.Quarantine.take

    def take(self: gitcheck.Quarantine, path: str, why: str) -> None:
        if path.startswith(str(repos[0])):
            raise PermissionError(13, "Permission denied", path)  # a read-only hooks/
        taken(self, path, why)

    monkeypatch.setattr(gitcheck.Quarantine, "take", take)
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    gitmade.check_made([str(r / ".git") for r in repos], str(workspace), [], 0, quarantine)
    assert not (repos[1] / ".git" / "hooks" / "pre-commit").exists()
    assert any(line.startswith(f"warning: {repos[0] / '.git'} could not be checked")
               for line in quarantine.lines), quarantine.lines


def test_a_fifo_whose_name_is_no_text_is_taken(tmp_path: Path) -> None:
    gitdir = tmp_path / "repo" / ".git"
    gitdir.mkdir(parents=True)
    name = os.fsdecode(b"\xff")
    os.mkfifo(gitdir / name)
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    quarantine.take(str(gitdir / name), "a FIFO")
    assert not os.path.lexists(gitdir / name) and quarantine.lines
