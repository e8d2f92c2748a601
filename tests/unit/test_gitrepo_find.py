"""Which git directory a launch overlays (gitrepo.find), read as git reads it.

A repository find() misses has no overlay: the session writes its git directory
directly, hooks and config included, for git outside to run. So a linked
worktree must lead to its common directory, and a `.git` find() cannot follow
(a link, a FIFO, a worktree directory outside its repository) refuses the launch.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.launch.overlay import gitrepo


def git(where: Path, *args: str) -> None:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "HOME": str(where), "PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "-C", str(where), *args], env=env, stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=60, check=True)


def _repository(tmp_path: Path) -> Path:
    main = tmp_path / "main"
    main.mkdir()
    git(main, "init", "-q", "-b", "main")
    (main / "f").write_text("x\n")
    git(main, "add", "f")
    git(main, "commit", "-qm", "one")
    return main


def _worktree(tmp_path: Path) -> tuple[Path, Path]:
    main = _repository(tmp_path)
    git(main, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"))
    return main, tmp_path / "wt"


def _refused(workspace: Path) -> str:
    with pytest.raises(SandboxError) as caught:
        gitrepo.find(str(workspace))
    assert caught.value.status == EXIT_REFUSED
    assert "\n" not in caught.value.message
    return caught.value.message


def test_a_linked_worktree_leads_to_its_common_directory(tmp_path: Path) -> None:
    main, wt = _worktree(tmp_path)
    assert not (main / ".git" / "worktrees" / "wt" / "objects").exists()  # as git makes it
    (found,) = gitrepo.find(str(wt))
    assert found.gitdir == os.path.realpath(main / ".git")
    assert found.top == str(wt)
    assert "linked worktree" in found.why


def test_a_linked_worktree_is_found_from_a_subdirectory(tmp_path: Path) -> None:
    main, wt = _worktree(tmp_path)
    (wt / "deep" / "er").mkdir(parents=True)
    (found,) = gitrepo.find(str(wt / "deep" / "er"))
    assert (found.gitdir, found.top) == (os.path.realpath(main / ".git"), str(wt))


def test_the_worktrees_git_file_still_leads_to_the_common_directory(tmp_path: Path) -> None:
    main, wt = _worktree(tmp_path)
    assert gitrepo.names_gitdir(str(wt / ".git"), str(main / ".git"))
    # Repointed at a worktree-like directory outside the repository: not passed over.
    other = tmp_path / "other"
    other.mkdir()
    (other / "HEAD").write_text("ref: refs/heads/side\n")
    (other / "commondir").write_text(f"{main / '.git'}\n")
    (wt / ".git").write_text(f"gitdir: {other}\n")
    assert not gitrepo.names_gitdir(str(wt / ".git"), str(main / ".git"))


def test_a_plain_repository_and_a_separate_git_directory(tmp_path: Path) -> None:
    main = _repository(tmp_path)
    (found,) = gitrepo.find(str(main))
    assert (found.gitdir, found.top) == (str(main / ".git"), str(main))
    apart = tmp_path / "apart"
    apart.mkdir()
    git(apart, "init", "-q", f"--separate-git-dir={tmp_path / 'apart.git'}")
    (found,) = gitrepo.find(str(apart))
    assert (found.gitdir, found.top) == (str(tmp_path / "apart.git"), str(apart))


def test_a_worktree_whose_repository_fails_gits_test_is_no_repository(tmp_path: Path) -> None:
    main, wt = _worktree(tmp_path)
    meta = main / ".git" / "worktrees" / "wt"
    (main / ".git" / "refs").rename(tmp_path / "refs")  # git: not a git repository
    assert gitrepo.find(str(wt)) == ()
    (tmp_path / "refs").rename(main / ".git" / "refs")
    (main / ".git" / "objects").rename(tmp_path / "objects")
    (main / ".git" / "objects").symlink_to(tmp_path / "objects")  # a link is not objects/
    assert gitrepo.find(str(wt)) == ()
    (main / ".git" / "objects").unlink()
    (tmp_path / "objects").rename(main / ".git" / "objects")
    (meta / "HEAD").unlink()
    assert gitrepo.find(str(wt)) == ()


def test_a_worktree_directory_outside_its_repository_refuses(tmp_path: Path) -> None:
    main, wt = _worktree(tmp_path)
    moved = tmp_path / "moved"
    (main / ".git" / "worktrees" / "wt").rename(moved)
    (moved / "commondir").write_text(f"{main / '.git'}\n")
    (wt / ".git").write_text(f"gitdir: {moved}\n")
    message = _refused(wt)
    assert str(wt / ".git") in message and "worktrees/" in message


def test_a_worktree_commondir_that_is_a_link_refuses(tmp_path: Path) -> None:
    main, wt = _worktree(tmp_path)
    commondir = main / ".git" / "worktrees" / "wt" / "commondir"
    commondir.unlink()
    (tmp_path / "c").write_text("../..\n")
    commondir.symlink_to(tmp_path / "c")  # git follows it; the launch reads no link
    assert "commondir" in _refused(wt)


@pytest.mark.parametrize("at", ["", "sub"])
def test_a_git_link_refuses_with_the_git_file_that_replaces_it(tmp_path: Path, at: str) -> None:
    """At the workspace's top, or above a workspace launched from a subdirectory."""
    main = _repository(tmp_path)
    checkout = tmp_path / "checkout"
    (checkout / "sub").mkdir(parents=True)
    (checkout / ".git").symlink_to(main / ".git")
    message = _refused(checkout / at)
    assert str(checkout / ".git") in message and "symbolic link" in message
    command = message.split("follows the same way: ", 1)[1]
    subprocess.run(["sh", "-c", command], check=True)
    (found,) = gitrepo.find(str(checkout / at))
    assert (found.gitdir, found.top) == (str(main / ".git"), str(checkout))


def test_a_dangling_git_link_and_a_git_fifo_refuse(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").symlink_to(tmp_path / "nowhere")
    assert "symbolic link" in _refused(workspace)
    (workspace / ".git").unlink()
    os.mkfifo(workspace / ".git")
    assert "FIFO" in _refused(workspace)


def test_no_git_entry_or_a_git_file_git_cannot_use_is_no_repository(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").write_text("not a gitdir line\n")
    assert gitrepo.find(str(workspace)) == ()
    (workspace / ".git").write_text(f"gitdir: {tmp_path / 'nowhere'}\n")
    assert gitrepo.find(str(workspace)) == ()


def test_a_link_in_the_workspace_on_the_way_to_the_git_directory_refuses(
        tmp_path: Path) -> None:
    """A link a session left where the .git file's path passes (meta -> another
    repository) would lead the launch, and the session's end, there."""
    other = _repository(tmp_path)
    workspace = tmp_path / "ws"
    (workspace / "meta.moved").mkdir(parents=True)
    (workspace / "meta").symlink_to(other)
    for written in ("meta/.git", f"{workspace}/meta/.git", "sub/../meta/.git"):
        (workspace / ".git").write_text(f"gitdir: {written}\n")
        (workspace / "sub").mkdir(exist_ok=True)
        with pytest.raises(SandboxError) as refused:
            gitrepo.find(str(workspace))
        assert refused.value.status == EXIT_REFUSED
        assert f"through {workspace}/meta, a symbolic link in the workspace" in str(
            refused.value)


def test_links_outside_the_workspace_and_plain_paths_are_followed(tmp_path: Path) -> None:
    """An operator's link outside the workspace (a home on another disk) is not the
    agent's: the git directory behind it is found as git finds it."""
    main = _repository(tmp_path)
    (tmp_path / "elsewhere").symlink_to(main)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").write_text(f"gitdir: {tmp_path}/elsewhere/.git\n")
    assert gitrepo.link_on_the_way(str(workspace / ".git"), str(workspace)) is None
    assert [r.gitdir for r in gitrepo.find(str(workspace))] == [str(main / ".git")]
