"""One session's end spends a bounded time and count on git, whatever the session made:
submodules past the count or the depth, and anything past the clock, are not applied
but kept in the store and named (gitbudget.py). Real git, real repositories."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from claude_sandbox.launch.overlay import gitapply, gitbase, gitbudget, gitobjects

from .test_gitcontrol import ENV, commit, git, session


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    commit(work, {"README": "hello\n"}, "base")
    return work


def _modules(view: Path, names: list[str]) -> None:
    """Submodule git directories the session made under modules/ (as `git submodule add`
    makes them), each with a commit of its own."""
    for name in names:
        gitdir = view / Path(name)
        gitdir.parent.mkdir(parents=True, exist_ok=True)
        tree = view.parent / f"tree-{name.replace('/', '-')}"
        tree.mkdir(parents=True)
        git(tree, "init", "-q", "-b", "main", "--separate-git-dir", str(gitdir))
        commit(tree, {"f": name}, "c", gitdir)


def test_submodules_past_the_count_are_kept_and_named(repo: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitbudget, "MODULES", 2)
    upper, base = session(repo, tmp_path, lambda view: _modules(
        view, [f"modules/m{i}" for i in range(4)]))
    result = gitapply.apply(upper, str(repo / ".git"), base, str(repo))
    applied = sorted(os.listdir(repo / ".git" / "modules"))
    assert applied == ["m0", "m1"]
    refused = [line for line in result.lines if "more submodules than" in line]
    assert [line.split(": not applied")[0] for line in refused] == [
        str(repo / ".git" / "modules" / f"m{i}") for i in (2, 3)]
    assert result.kept


def test_submodules_nested_past_the_depth_are_kept_and_named(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitbudget, "DEPTH", 2)
    nested = ["modules/a", "modules/a/modules/b", "modules/a/modules/b/modules/c"]
    upper, base = session(repo, tmp_path, lambda view: _modules(view, nested))
    result = gitapply.apply(upper, str(repo / ".git"), base, str(repo))
    assert (repo / ".git" / "modules" / "a" / "modules" / "b" / "HEAD").exists()
    assert not (repo / ".git" / "modules" / "a" / "modules" / "b" / "modules").exists()
    assert any("nested more than 2 deep" in line for line in result.lines), result.lines
    assert result.kept


def test_past_the_clock_objects_are_kept_and_refs_wait(repo: Path, tmp_path: Path) -> None:
    before = git(repo, "rev-parse", "main")
    upper, base = session(repo, tmp_path, lambda view: commit(
        repo, {"src/a.py": "x = 1\n"}, "c", view))
    result = gitapply.apply(upper, str(repo / ".git"), base, str(repo),
                            spend=gitbudget.ExitBudget(seconds=0))
    assert git(repo, "rev-parse", "main") == before
    assert any(gitbudget.OUT_OF_TIME in line for line in result.lines), result.lines
    assert result.kept


def test_packs_are_counted_across_repositories() -> None:
    shared = gitbudget.ExitBudget()
    first, second = (gitobjects.Budget(shared=shared), gitobjects.Budget(sha256=True,
                                                                         shared=shared))
    shared.packs = gitobjects.PACKS
    assert first.refusal() is not None and second.refusal() is not None
    shared.packs, shared.deadline = 0, time.monotonic() - 1
    assert first.refusal() == gitbudget.OUT_OF_TIME


def test_a_snapshot_is_what_the_directory_held(repo: Path) -> None:
    snap = gitbase.snapshot(str(repo / ".git"))
    assert dict(snap.loose)["refs/heads/main"] == git(repo, "rev-parse", "main")


@pytest.mark.parametrize("name", ["refs/heads/x", "HEAD"])
def test_a_value_naming_no_object_is_not_kept_as_a_ref(repo: Path, tmp_path: Path,
                                                       name: str) -> None:
    """An id the agent made up (or whose objects were not carried): kept as a ref under
    refs/claude-sandbox/, it made `git for-each-ref`, `git gc` and `git fsck` fail."""
    made_up = "1234567890123456789012345678901234567890"
    upper, base = session(repo, tmp_path, lambda view: (view / name).write_text(made_up + "\n"))
    result = gitapply.apply(upper, str(repo / ".git"), base, str(repo))
    assert any(f"({made_up}) names objects this repository does not hold" in line
               for line in result.lines), result.lines
    assert result.kept  # the value stays in the store, with the session's directory
    for argv in (["for-each-ref"], ["gc", "-q"], ["fsck", "--no-dangling"]):
        git(repo, *argv)  # check=True: each exits 0


def test_past_the_clock_no_ref_names_an_object_not_carried(repo: Path,
                                                           tmp_path: Path) -> None:
    upper, base = session(repo, tmp_path, lambda view: commit(
        repo, {"src/a.py": "x = 1\n"}, "c", view))
    gitapply.apply(upper, str(repo / ".git"), base, str(repo),
                   spend=gitbudget.ExitBudget(seconds=0))
    git(repo, "for-each-ref")
    git(repo, "gc", "-q")


def test_a_commit_whose_blob_is_missing_moves_no_ref(repo: Path, tmp_path: Path) -> None:
    """The session carries a commit and its tree but not a blob the tree names: applied,
    the branch would name it, and git gc, fsck and a checkout of it fail outside."""
    before = git(repo, "rev-parse", "main")

    def act(view: Path) -> None:
        env = dict(ENV, GIT_DIR=str(view))
        blob = subprocess.run(["git", "hash-object", "--stdin"], cwd=repo, env=env,
                              input="evil\n", text=True, capture_output=True,
                              check=True).stdout.strip()  # computed, never written
        tree = subprocess.run(["git", "mktree", "--missing"], cwd=repo, env=env,
                              input=f"100644 blob {blob}\tx\n", text=True,
                              capture_output=True, check=True).stdout.strip()
        made = git(repo, "commit-tree", tree, "-p", before, "-m", "c", gitdir=view)
        git(repo, "update-ref", "refs/heads/main", made, gitdir=view)

    upper, base = session(repo, tmp_path, act)
    result = gitapply.apply(upper, str(repo / ".git"), base, str(repo))
    assert git(repo, "rev-parse", "main") == before
    assert result.kept
    for argv in (["for-each-ref"], ["gc", "-q"], ["fsck", "--no-dangling"]):
        git(repo, *argv)


def test_an_index_naming_a_missing_blob_is_not_applied(repo: Path, tmp_path: Path) -> None:
    made_up = "1111111111111111111111111111111111111111"
    upper, base = session(repo, tmp_path, lambda view: git(
        repo, "update-index", "--add", "--cacheinfo", f"100644,{made_up},f", gitdir=view))
    result = gitapply.apply(upper, str(repo / ".git"), base, str(repo))
    assert any("index was not applied (it names objects" in line for line in result.lines), \
        result.lines
    assert result.kept
    assert "f" not in git(repo, "ls-files")
    git(repo, "gc", "-q")
