"""The `.git` entry of an overlaid repository at the session's end (making.workspace_exit).

It is passed over only while it still leads to the overlaid git directory: a `.git`
file the agent repointed at a repository it made would have git outside run that
repository's hooks and config, so it reaches check_made as any plant does.
"""

from __future__ import annotations

import os
from pathlib import Path

from claude_sandbox.launch.overlay import gitcheck, gitrepo, gitsession


def _layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    workspace = tmp_path / "ws"
    gitdir = tmp_path / "repo.git"
    for sub in ("objects", "refs", "hooks"):
        (gitdir / sub).mkdir(parents=True)
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
    workspace.mkdir()
    (workspace / ".git").write_text(f"gitdir: {gitdir}\n")
    return workspace, gitdir, tmp_path / "store"


def test_a_git_file_or_directory_that_still_leads_there_is_passed_over(tmp_path: Path) -> None:
    workspace, gitdir, _ = _layout(tmp_path)
    assert gitrepo.names_gitdir(str(workspace / ".git"), str(gitdir))
    (workspace / ".git").write_text("gitdir: ../repo.git\n")  # the same place, relative
    assert gitrepo.names_gitdir(str(workspace / ".git"), str(gitdir))
    plain = tmp_path / "plain"
    (plain / ".git").mkdir(parents=True)
    assert gitrepo.names_gitdir(str(plain / ".git"), str(plain / ".git"))


def test_a_repointed_git_file_or_a_link_is_not(tmp_path: Path) -> None:
    workspace, gitdir, store = _layout(tmp_path)
    evil = store / "home" / "evil"
    (evil / "hooks").mkdir(parents=True)
    (workspace / ".git").write_text(f"gitdir: {evil}\n")
    assert not gitrepo.names_gitdir(str(workspace / ".git"), str(gitdir))
    (workspace / ".git").unlink()
    (workspace / ".git").symlink_to(gitdir)  # even to the right place: a link is chosen
    assert not gitrepo.names_gitdir(str(workspace / ".git"), str(gitdir))
    assert not gitrepo.names_gitdir(str(workspace / "missing"), str(gitdir))


def test_check_made_takes_a_repointed_git_file_and_a_git_link(tmp_path: Path) -> None:
    workspace, gitdir, store = _layout(tmp_path)
    evil = store / "home" / "evil"
    evil.mkdir(parents=True)
    (workspace / ".git").write_text(f"gitdir: {evil}\n")
    nested = workspace / "sub"
    nested.mkdir()
    (nested / ".git").symlink_to(evil)
    quarantine = gitcheck.Quarantine(str(tmp_path / "quarantine"))
    gitsession.check_made([str(workspace / ".git"), str(nested / ".git")], str(workspace),
                          [str(gitdir)], 0, quarantine)
    assert not os.path.lexists(workspace / ".git")
    assert not os.path.lexists(nested / ".git")
    assert len(quarantine.lines) >= 2
