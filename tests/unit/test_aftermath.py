"""The aftermath scan: what the session left that a program outside runs, follows or reads."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from claude_sandbox.launch.overlay import aftermath
from claude_sandbox.launch.overlay.aftermath import Finding

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CONTROL = frozenset({".git", ".claude", ".mcp.json", ".vscode", ".envrc"})


def later() -> int:
    """A `since_ns` after everything made so far, and before everything made next.

    File times come from the kernel's coarse clock, which lags time_ns() by up to a
    tick: waiting on both sides keeps old entries old and new entries new."""
    time.sleep(0.03)
    since = time.time_ns()
    time.sleep(0.03)
    return since


def write(path: Path, text: str = "", mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def scan(root: Path, since: int, names: frozenset[str] = CONTROL) -> list[tuple[str, str]]:
    return [(f.kind, f.path) for f in aftermath.scan([str(root)], since, names)]


def changed(path: Path, since: int) -> None:
    """The test's own check that the entry it made really counts as new."""
    assert os.lstat(path).st_ctime_ns >= since


def test_the_classes_are_in_report_order() -> None:
    assert [kind for kind, _ in aftermath.CLASSES] == [
        "special", "unreadable", "link-out", "git", "control", "python-startup", "bytecode",
        "executable", "dot-config"]
    assert all(meaning for _, meaning in aftermath.CLASSES)


def test_fifos_and_sockets_are_special(tmp_path: Path) -> None:
    since = later()
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "sub" / ".hidden-pipe")  # special before dot-config
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(tmp_path / "sock"))
        changed(tmp_path / "sock", since)
        assert scan(tmp_path, since) == [
            ("special", "pipe"), ("special", "sock"), ("special", "sub/.hidden-pipe")]


def test_links_out_of_the_roots_are_reported_and_links_inside_are_not(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    since = later()
    (root / "up").symlink_to("../outside")
    (root / "a" / "deep-up").symlink_to("../../../outside")
    (root / "abs-out").symlink_to("/etc/passwd")
    (root / "abs-in").symlink_to(root / "a")
    (root / "rel-in").symlink_to("a/b/../b/c")
    (root / "dangling-in").symlink_to("a/nothing-here")
    # `top` leads back to the root, so `top/../z` stays in the root as read but is
    # the root's parent's `z` as the kernel resolves it.
    (root / "a" / "b" / "c" / "top").symlink_to("../../..")
    (root / "a" / "b" / "c" / "sly").symlink_to("top/../outside")
    assert os.path.realpath(root / "a" / "b" / "c" / "sly") == str(tmp_path / "outside")
    assert scan(root, since) == [
        ("link-out", "a/b/c/sly"), ("link-out", "a/deep-up"), ("link-out", "abs-out"),
        ("link-out", "up")]


def test_a_link_into_another_root_stays_inside(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    since = later()
    (tmp_path / "one" / "there").symlink_to("../two")
    (tmp_path / "one" / "away").symlink_to("..")
    found = aftermath.scan([str(tmp_path / "one"), str(tmp_path / "two")], since, CONTROL)
    assert found == (Finding(str(tmp_path / "one" / "away"), "link-out"),)


def test_git_directories_files_and_bare_repositories(tmp_path: Path) -> None:
    write(tmp_path / ".git" / "HEAD", "ref: refs/heads/main\n")  # old: unchanged
    write(tmp_path / ".git" / "objects" / "ab" / "cd")
    write(tmp_path / "old" / ".git" / "objects" / "ab" / "cd")
    since = later()
    write(tmp_path / "vendor" / "lib" / ".git" / "hooks" / "post-checkout", "#!/bin/sh\n", 0o755)
    write(tmp_path / "module" / ".git", "gitdir: ../.git/modules/module\n")
    bare = tmp_path / "cache" / "mirror.git"
    write(bare / "HEAD", "ref: refs/heads/main\n")
    (bare / "objects").mkdir()
    write(bare / "refs" / "heads" / "main", "0" * 40 + "\n", 0o755)
    write(bare / "hooks" / "pre-receive", "#!/bin/sh\n", 0o755)
    # A change at any depth names the git directory, not the entry: the entry is
    # another module's to check.
    write(tmp_path / "old" / ".git" / "objects" / "ab" / "ef", mode=0o755)
    assert scan(tmp_path, since) == [
        ("git", "cache/mirror.git"), ("git", "module/.git"), ("git", "old/.git"),
        ("git", "vendor/lib/.git")]


def test_a_git_directory_is_reported_when_an_entry_directly_in_it_changed(
        tmp_path: Path) -> None:
    write(tmp_path / "sub" / ".git" / "config")
    since = later()
    write(tmp_path / "sub" / ".git" / "config", "[core]\n\tfsmonitor = evil\n")
    changed(tmp_path / "sub" / ".git" / "config", since)
    assert os.lstat(tmp_path / "sub" / ".git").st_ctime_ns < since
    assert scan(tmp_path, since) == [("git", "sub/.git")]


def test_a_bare_root_is_reported_as_itself(tmp_path: Path) -> None:
    since = later()
    write(tmp_path / "HEAD", "ref: refs/heads/main\n")
    (tmp_path / "objects").mkdir()
    (tmp_path / "refs").mkdir()
    assert scan(tmp_path, since) == [("git", ".")]


def test_a_git_directory_is_told_by_names_of_any_type_as_git_tells_it(
        tmp_path: Path) -> None:
    (tmp_path / "store" / "objects").mkdir(parents=True)
    (tmp_path / "store" / "refs").mkdir()
    since = later()
    # HEAD a link into refs/, objects and refs plain directories: git takes it.
    plant = tmp_path / "src"
    (plant / "objects").mkdir(parents=True)
    (plant / "refs").mkdir()
    (plant / "HEAD").symlink_to("refs/heads/main")
    write(plant / "config", "[core]\n\tbare = false\n\tworktree = .\n")
    # objects and refs links to directories; a HEAD and a commondir.
    linked = tmp_path / "linked"
    linked.mkdir()
    write(linked / "HEAD", "ref: refs/heads/main\n")
    (linked / "objects").symlink_to("../store/objects")
    (linked / "refs").symlink_to("../store/refs")
    write(tmp_path / "common" / "HEAD", "ref: refs/heads/main\n")
    write(tmp_path / "common" / "commondir", "../store\n")
    write(tmp_path / "headless" / "objects" / "x")  # no HEAD: git looks further up
    write(tmp_path / "headless" / "refs" / "y")
    assert scan(tmp_path, since) == [
        ("git", "common"), ("git", "linked"), ("git", "src")]


def test_the_names_test_against_git_itself(tmp_path: Path) -> None:
    plant = tmp_path / "src"
    (plant / "objects").mkdir(parents=True)
    (plant / "refs").mkdir()
    (plant / "HEAD").symlink_to("refs/heads/main")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    told = subprocess.run(["git", "-C", str(plant), "rev-parse", "--git-dir"], env=env,
                          capture_output=True, text=True, check=False)
    assert told.returncode == 0 and told.stdout.strip() == "."
    assert aftermath.git_directory(os.listdir(plant))
    assert not aftermath.git_directory(["HEAD", "objects"])
    assert not aftermath.git_directory(["objects", "refs", "commondir"])


def test_a_git_directory_is_reported_for_a_change_at_any_depth(tmp_path: Path) -> None:
    for name in ("hook", "modules", "worktree", "log", "quiet"):
        git = tmp_path / name / ".git"
        write(git / "HEAD", "ref: refs/heads/main\n")
        write(git / "hooks" / "pre-commit", "#!/bin/sh\n", 0o755)
        write(git / "modules" / "lib" / "config")
        write(git / "worktrees" / "wt" / "config.worktree")
        write(git / "logs" / "refs" / "heads" / "main")
    since = later()
    # Each rewritten or replaced in place: only the entry's own directory changes.
    write(tmp_path / "hook" / ".git" / "hooks" / "pre-commit", "#!/bin/sh\nevil\n")
    write(tmp_path / "modules" / ".git" / "modules" / "lib" / "config", "[core]\n")
    write(tmp_path / "worktree" / ".git" / "worktrees" / "wt" / "config.worktree", "[core]\n")
    log = tmp_path / "log" / ".git" / "logs" / "refs" / "heads" / "main"
    log.unlink()
    log.symlink_to("/etc/passwd")  # git appends to the reflog through the link
    for name in ("hook", "modules", "worktree", "log", "quiet"):
        git = tmp_path / name / ".git"
        assert all(os.lstat(git / entry).st_ctime_ns < since
                   for entry in (".", *os.listdir(git)))
    assert scan(tmp_path, since) == [
        ("git", "hook/.git"), ("git", "log/.git"), ("git", "modules/.git"),
        ("git", "worktree/.git")]


def test_control_files_at_any_depth_each_directory_once(tmp_path: Path) -> None:
    write(tmp_path / "old" / ".claude" / "hooks" / "keep.sh")
    write(tmp_path / "quiet" / ".vscode" / "settings.json")
    since = later()
    write(tmp_path / ".mcp.json", "{}")
    write(tmp_path / "a" / "b" / "c" / ".envrc", "use nix\n")
    write(tmp_path / "sub" / ".claude" / "settings.json", "{}")
    write(tmp_path / "sub" / ".claude" / "hooks" / "x.sh", "#!/bin/sh\n", 0o755)
    os.mkfifo(tmp_path / "sub" / ".claude" / "pipe")  # not separately: the directory is named
    # Unchanged itself, changed deep inside: the directory is named, once.
    write(tmp_path / "old" / ".claude" / "hooks" / "keep.sh", "#!/bin/sh\n", 0o755)
    write(tmp_path / "old" / ".claude" / "hooks" / "more.sh", "#!/bin/sh\n", 0o755)
    assert os.lstat(tmp_path / "old" / ".claude").st_ctime_ns < since
    assert scan(tmp_path, since) == [
        ("control", ".mcp.json"), ("control", "a/b/c/.envrc"), ("control", "old/.claude"),
        ("control", "sub/.claude")]


def test_python_startup_files(tmp_path: Path) -> None:
    since = later()
    write(tmp_path / ".venv" / "bin" / "activate", "export PATH\n")
    write(tmp_path / ".venv" / "bin" / "activate.fish")
    write(tmp_path / ".venv" / "pyvenv.cfg", "home = /usr/bin\n")
    site = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    write(site / "evil.pth", "import os; os.system('x')\n")
    write(site / "sitecustomize.py")
    write(tmp_path / "usercustomize.py")
    write(tmp_path / "env" / "Scripts" / "Activate.ps1")
    write(tmp_path / "docs" / "activate")  # not in bin/ or Scripts/: ordinary
    assert scan(tmp_path, since) == [
        ("python-startup", ".venv/bin/activate"), ("python-startup", ".venv/bin/activate.fish"),
        ("python-startup", ".venv/lib/python3.11/site-packages/evil.pth"),
        ("python-startup", ".venv/lib/python3.11/site-packages/sitecustomize.py"),
        ("python-startup", ".venv/pyvenv.cfg"), ("python-startup", "env/Scripts/Activate.ps1"),
        ("python-startup", "usercustomize.py")]


def test_bytecode_executables_and_dot_config(tmp_path: Path) -> None:
    since = later()
    write(tmp_path / "pkg" / "__pycache__" / "x.cpython-311.pyc")
    write(tmp_path / "pkg" / "old.pyo")
    write(tmp_path / "tools" / "run", "#!/bin/sh\n", 0o755)
    write(tmp_path / "group-only", mode=0o610)
    write(tmp_path / ".npmrc", "registry=https://evil.example/\n")
    write(tmp_path / ".cargo" / "config.toml")
    write(tmp_path / "a" / ".config" / "tool" / "deep" / "settings.ini")
    write(tmp_path / "src" / "main.py", "print('hello')\n")  # ordinary source
    write(tmp_path / "README.md")
    os.symlink(".npmrc", tmp_path / ".yarnrc")  # a link inside, not a regular file
    assert scan(tmp_path, since) == [
        ("control", ".npmrc"), ("control", ".yarnrc"),
        ("bytecode", "pkg/__pycache__/x.cpython-311.pyc"), ("bytecode", "pkg/old.pyo"),
        ("executable", "group-only"), ("executable", "tools/run"),
        ("dot-config", ".cargo/config.toml"),
        ("dot-config", "a/.config/tool/deep/settings.ini")]


def test_tool_files_that_name_a_program_are_control_files_at_any_depth(tmp_path: Path) -> None:
    since = later()
    for name in ("bunfig.toml", ".pnpmfile.cjs", ".yarnrc.yml", "lefthook.yml", "mise.toml",
                 ".pre-commit-config.yaml", "rust-toolchain.toml", ".lfsconfig", ".pdbrc"):
        write(tmp_path / "sub" / name)
    write(tmp_path / "sub" / "package.json", "{}")  # ordinary source: live mode trusts it
    assert {kind for kind, _ in scan(tmp_path, since)} == {"control"}
    assert len(scan(tmp_path, since)) == 9


def test_a_dot_root_does_not_make_its_files_dot_config(tmp_path: Path) -> None:
    root = tmp_path / ".ws"
    root.mkdir()
    since = later()
    write(root / "plain.txt")
    assert scan(root, since) == []


def test_entries_older_than_the_session_are_not_reported(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    write(tmp_path / "run", mode=0o755)
    write(tmp_path / ".npmrc")
    write(tmp_path / "sub" / ".mcp.json")
    (tmp_path / "out").symlink_to("/etc")
    since = later()
    write(tmp_path / "src" / "new.py")  # a change, but ordinary
    assert scan(tmp_path, since) == []
    # A later change of the inode (here its mode) makes it new again.
    (tmp_path / "run").chmod(0o700)
    changed(tmp_path / "run", since)
    assert scan(tmp_path, since) == [("executable", "run")]


def test_the_walk_is_complete_on_a_wide_and_deep_tree(tmp_path: Path) -> None:
    # The attack made 210,000 directories; creating and removing that many takes about
    # 80 s on the test machine, so the test uses 50,000 and a chain deeper than the
    # interpreter's recursion limit (the scan of 210,000 was measured by hand).
    wide, fanout, depth = 49, 1000, sys.getrecursionlimit() + 100
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(wide):
        for j in range(fanout):
            os.makedirs(f"{root}/w{i}/{j}")
    chain = [str(root)]
    for _ in range(depth):
        chain.append(chain[-1] + "/d")
        os.mkdir(chain[-1])
    since = later()
    write(tmp_path / "ws-deepest", mode=0o755).rename(chain[-1] + "/run")
    (root / "w7" / "999" / ".pylintrc").write_text("")
    try:
        started = time.perf_counter()
        found = aftermath.scan([str(root)], since, CONTROL)
        seconds = time.perf_counter() - started
        print(f"\nscan of {wide * (fanout + 1) + depth} directories: {seconds:.2f} s")
        assert found == (Finding("d/" * depth + "run", "executable"),
                         Finding("w7/999/.pylintrc", "dot-config"))
    finally:
        # By hand: shutil.rmtree recurses, and the chain is deeper than it can go.
        os.unlink(chain[-1] + "/run")
        for path in reversed(chain[1:]):
            os.rmdir(path)
        os.unlink(root / "w7" / "999" / ".pylintrc")
        for i in range(wide):
            for j in range(fanout):
                os.rmdir(f"{root}/w{i}/{j}")
            os.rmdir(f"{root}/w{i}")


def test_overlapping_roots_report_each_path_once(tmp_path: Path) -> None:
    since = later()
    write(tmp_path / "sub" / "run", mode=0o755)
    write(tmp_path / ".cfg" / "conf")  # dot-config under tmp_path, ordinary under .cfg
    roots = [str(tmp_path), str(tmp_path / "sub"), str(tmp_path / ".cfg"), str(tmp_path)]
    assert aftermath.scan(roots, since, CONTROL) == (
        Finding(str(tmp_path / "sub" / "run"), "executable"),
        Finding(str(tmp_path / ".cfg" / "conf"), "dot-config"))


def test_a_root_that_is_a_link_or_missing_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    since = later()
    write(tmp_path / "real" / "run", mode=0o755)
    assert aftermath.scan([str(tmp_path / "link")], since, CONTROL) == ()
    assert aftermath.scan([str(tmp_path / "missing")], since, CONTROL) == ()
    assert aftermath.scan([str(tmp_path / "missing"), str(tmp_path / "real")], since,
                          CONTROL) == (Finding(str(tmp_path / "real" / "run"), "executable"),)


def refuse_listing(monkeypatch: pytest.MonkeyPatch, *refused: Path) -> None:
    """os.scandir refuses `refused` as the kernel refuses a directory without read
    permission: chmod stops no one when the tests run as root."""
    real_scandir = os.scandir
    names = {str(path) for path in refused}

    def scandir(path: str) -> Iterator[os.DirEntry[str]]:
        if str(path) in names:
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_directory_left_unreadable_is_named_and_an_old_one_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "old-locked" / "run", mode=0o755)
    since = later()
    # What the agent put in `locked` before it took the read bit away stays usable to
    # a program outside that knows the names.
    write(tmp_path / "locked" / "run", mode=0o755)
    (tmp_path / "locked" / "rc").symlink_to("/etc/passwd")
    write(tmp_path / "open" / "run", mode=0o755)
    changed(tmp_path / "locked", since)
    assert os.lstat(tmp_path / "old-locked").st_ctime_ns < since
    refuse_listing(monkeypatch, tmp_path / "locked", tmp_path / "old-locked")
    assert scan(tmp_path, since) == [("unreadable", "locked"), ("executable", "open/run")]


def test_an_unreadable_control_directory_or_root_is_named_as_unreadable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    since = later()
    write(tmp_path / "ws" / ".claude" / "settings.json", "{}")
    refuse_listing(monkeypatch, tmp_path / "ws" / ".claude")
    assert scan(tmp_path / "ws", since) == [("unreadable", ".claude")]
    refuse_listing(monkeypatch, tmp_path / "ws")
    assert scan(tmp_path / "ws", since) == [("unreadable", ".")]


def test_an_unreadable_directory_in_a_git_directory_names_the_git_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Old, all of it: only the listing is refused. git outside still opens
    # logs/HEAD by name, and what the check after the session cannot list it cannot
    # clean, so the repository is named.
    write(tmp_path / "sub" / ".git" / "logs" / "HEAD")
    write(tmp_path / "bare" / "HEAD", "ref: refs/heads/main\n")
    (tmp_path / "bare" / "objects").mkdir()
    write(tmp_path / "bare" / "refs" / "heads" / "main")
    write(tmp_path / "shut" / ".git" / "HEAD")
    since = later()
    refuse_listing(monkeypatch, tmp_path / "sub" / ".git" / "logs",
                   tmp_path / "bare" / "refs" / "heads", tmp_path / "shut" / ".git")
    assert scan(tmp_path, since) == [("git", "bare"), ("git", "shut/.git"), ("git", "sub/.git")]


def test_report_lines_name_each_class_once_in_order() -> None:
    findings = (Finding("pipe", "special"), Finding("bin/run", "executable"),
                Finding("tools/x", "executable"), Finding("y", "executable"))
    assert aftermath.report_lines(findings, None) == [
        "the session created or changed 1 special file (a FIFO, socket or device): pipe; "
        "review it before a program outside opens it: it blocks or talks to the agent",
        "the session created or changed 3 executable files (a regular file with an execute "
        "bit): bin/run, tools/x, y; review them before running them outside"]
    assert aftermath.report_lines((), "/nowhere/list") == []


def test_report_lines_say_what_an_unreadable_directory_asks() -> None:
    assert aftermath.report_lines((Finding("sub/.cache", "unreadable"),), None) == [
        "the session created or changed 1 unreadable directory (a directory that could not "
        "be listed: what is in it was hidden from review): sub/.cache; review what is in it "
        "(made readable first where the walk could not) before a program outside opens "
        "anything there"]


def test_report_lines_cut_long_classes_and_write_the_full_list(tmp_path: Path) -> None:
    findings = (*(Finding(f"bin/t{i:02}", "executable") for i in range(12)),
                Finding(".npmrc", "dot-config"), Finding("evil\n\x1b[2Jname", "dot-config"))
    full = tmp_path / "aftermath.txt"
    (tmp_path / "elsewhere").write_text("keep\n")
    full.symlink_to("elsewhere")  # replaced, not followed
    (tmp_path / "aftermath.txt.part").write_text("stale")
    lines = aftermath.report_lines(findings, str(full), limit=10)
    named = ", ".join(f"bin/t{i:02}" for i in range(10))
    assert lines[0] == (
        f"the session created or changed 12 executable files (a regular file with an execute "
        f"bit): {named} and 2 more (all 12 in {full}); review them before running them outside")
    assert "\n" not in lines[1] and "\x1b" not in lines[1] and "evil\\n\\x1b[2Jname" in lines[1]
    assert "more" not in lines[1]
    assert stat.S_IMODE(os.lstat(full).st_mode) == 0o600
    assert stat.S_ISREG(os.lstat(full).st_mode)
    assert (tmp_path / "elsewhere").read_text() == "keep\n"
    assert not (tmp_path / "aftermath.txt.part").exists()
    assert full.read_text().splitlines() == [
        *(f"executable\tbin/t{i:02}" for i in range(12)), "dot-config\t.npmrc",
        "dot-config\tevil\\n\\x1b[2Jname"]


def test_report_lines_without_a_full_list_or_without_a_cut(tmp_path: Path) -> None:
    findings = tuple(Finding(f"t{i}", "bytecode") for i in range(3))
    assert aftermath.report_lines(findings, None, limit=2)[0].startswith(
        "the session created or changed 3 bytecode files (compiled Python, run in place of "
        "its source): t0, t1 and 1 more; review them")
    full = tmp_path / "list"
    aftermath.report_lines(findings, str(full), limit=3)
    assert not full.exists()  # nothing was cut: nothing to write
    unwritable = tmp_path / "no-such-dir" / "list"
    line = aftermath.report_lines(findings, str(unwritable), limit=1)[0]
    assert "and 2 more;" in line and str(unwritable) not in line
