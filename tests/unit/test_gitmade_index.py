"""What check_made does with a `.git` file git resolves elsewhere, and with an index
whose entries git would write into .git, in a repository that has no overlay."""

from __future__ import annotations

import os
from pathlib import Path

from claude_sandbox.launch.overlay import gitcheck, gitmade, gitrepo
from tests.unit.test_gitindex import git
from tests.unit.test_gitindex_paths import EXECUTABLE, FILE, crafted


def test_a_git_file_is_resolved_as_git_resolves_it(tmp_path: Path) -> None:
    # `..` after a link climbs from the link's target; a text-only reading would judge
    # the directory beside the link instead.
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "real").mkdir()
    (tmp_path / "l").symlink_to(tmp_path / "a" / "b" / "c")
    dotgit = tmp_path / ".git"
    dotgit.write_text("gitdir: l/../real\n")
    assert gitrepo.gitfile_target(str(dotgit)) == str(tmp_path / "a" / "b" / "real")
    dotgit.write_text("gitdir: a/b/real\r\n")  # git strips a trailing CR as well
    assert gitrepo.gitfile_target(str(dotgit)) == str(tmp_path / "a" / "b" / "real")
    dotgit.write_text("gitdir: a/b\rreal\n")
    assert gitrepo.gitfile_target(str(dotgit)) is None


def test_a_git_file_naming_no_directory_is_taken(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / ".git").write_text("gitdir: ../nothing-here\n")
    quarantine = gitcheck.Quarantine(str(tmp_path / "quarantine"))
    gitmade.check_made([str(workspace / "sub" / ".git")], str(workspace), [], 0, quarantine)
    assert not os.path.lexists(workspace / "sub" / ".git")
    assert any("names no git directory" in line for line in quarantine.lines)


def test_a_hostile_index_in_a_nested_repository_is_taken_an_ordinary_one_kept(
        tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    nested = workspace / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "a.txt").write_text("a\n")
    git(nested, "add", "a.txt")
    index = nested / ".git" / "index"
    ordinary = index.read_bytes()
    quarantine = gitcheck.Quarantine(str(tmp_path / "quarantine"))
    gitmade.check_made([str(nested / ".git")], str(workspace), [], 0, quarantine)
    assert index.read_bytes() == ordinary and not quarantine.lines
    index.write_bytes(crafted((b".git/hooks/post-checkout", EXECUTABLE), (b"a.txt", FILE)))
    gitmade.check_made([str(nested / ".git")], str(workspace), [], 0, quarantine)
    assert not index.exists()
    assert any(".git/hooks/post-checkout" in line for line in quarantine.lines)
