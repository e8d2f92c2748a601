"""A directory the session-end walk cannot list: opened up when it is ours, then walked.

The agent can take the read bit away from any directory it writes (`chmod 0311
vendor/lib`). git outside still opens the names it knows there, so a hook the agent
planted in a nested repository below would run at the user's next commit, while a
walk that only names the directory never brings that repository to the check.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from claude_sandbox.launch.overlay import aftermath, gitcheck, gitmade
from claude_sandbox.launch.overlay.aftermath import Finding

if TYPE_CHECKING:
    from collections.abc import Iterator

CONTROL = frozenset({".git", ".claude"})
NOBODY = 65534


def later() -> int:
    """A `since_ns` between what was made so far and what is made next (the kernel's
    file clock lags time_ns() by up to a tick)."""
    time.sleep(0.03)
    since = time.time_ns()
    time.sleep(0.03)
    return since


def repository(gitdir: Path) -> None:
    """What git takes for a git directory, made by hand: HEAD, objects/, refs/."""
    (gitdir / "objects").mkdir(parents=True)
    (gitdir / "refs" / "heads").mkdir(parents=True)
    (gitdir / "hooks").mkdir()
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")


def plant_hook(gitdir: Path) -> Path:
    hook = gitdir / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\ntouch /tmp/owned\n")
    hook.chmod(0o755)
    return hook


def as_the_kernel_lists(monkeypatch: pytest.MonkeyPatch, *, always: Path | None = None) -> None:
    """os.scandir refuses a directory whose owner has no read bit, as the kernel refuses
    its owner: root is refused nothing, and the tests may run as root. `always` is
    refused whatever its mode."""
    real_scandir = os.scandir

    def scandir(path: str) -> Iterator[os.DirEntry[str]]:
        if not os.lstat(path).st_mode & stat.S_IRUSR or str(path) == str(always):
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)


def scan(root: Path, since: int) -> list[Finding]:
    return list(aftermath.scan([str(root)], since, CONTROL))


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def vendored(tmp_path: Path) -> tuple[Path, Path, int]:
    """(workspace, W/vendor/lib, since): a nested repository that existed at launch, its
    pre-commit hook written in the session, then W/vendor/lib left at mode 0311."""
    workspace = tmp_path / "ws"
    repository(workspace / "vendor" / "lib" / "repo" / ".git")
    since = later()
    plant_hook(workspace / "vendor" / "lib" / "repo" / ".git")
    locked = workspace / "vendor" / "lib"
    locked.chmod(0o311)
    return workspace, locked, since


def test_a_repository_below_a_directory_left_unlistable_reaches_the_check(
        vendored: tuple[Path, Path, int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    workspace, locked, since = vendored
    as_the_kernel_lists(monkeypatch)
    found = scan(workspace, since)
    assert [(f.kind, f.path) for f in found] == [
        ("unreadable", "vendor/lib"), ("git", "vendor/lib/repo/.git")]
    assert found[0].note == (f"its mode 0311 was made 0711 so that what it holds was checked; "
                             f"to put it back: chmod 0311 {locked}")
    assert mode(locked) == 0o711
    # What the session end then does with it: the hook is taken.
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    gitmade.check_made([str(workspace / found[1].path)], str(workspace), [], since, quarantine)
    assert not (locked / "repo" / ".git" / "hooks" / "pre-commit").exists()
    assert any("pre-commit" in line for line in quarantine.lines)


def test_an_unlistable_directory_from_before_the_session_is_opened_and_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its own time says nothing about what lies below it: the agent needs only the
    # names to write there.
    repository(tmp_path / "old" / "repo" / ".git")
    (tmp_path / "old").chmod(0o311)
    since = later()
    plant_hook(tmp_path / "old" / "repo" / ".git")
    as_the_kernel_lists(monkeypatch)
    assert [(f.kind, f.path) for f in scan(tmp_path, since)] == [
        ("unreadable", "old"), ("git", "old/repo/.git")]


@pytest.mark.parametrize("how", ["not ours", "chmod fails"])
def test_a_directory_that_cannot_be_opened_is_only_named(
        vendored: tuple[Path, Path, int], monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    workspace, locked, since = vendored
    as_the_kernel_lists(monkeypatch)
    if how == "not ours":
        monkeypatch.setattr(os, "geteuid", lambda: os.lstat(locked).st_uid + 1)
    else:
        def refused(path: str, mode: int) -> None:
            raise PermissionError(1, "Operation not permitted", path)
        monkeypatch.setattr(os, "chmod", refused)
    assert scan(workspace, since) == [Finding(
        "vendor/lib", "unreadable",
        "it could not be listed or made listable: nothing below it could be checked")]
    assert mode(locked) == 0o311


def test_a_directory_still_refused_once_opened_says_both(
        vendored: tuple[Path, Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    workspace, locked, since = vendored
    as_the_kernel_lists(monkeypatch, always=locked)
    assert scan(workspace, since) == [Finding(
        "vendor/lib", "unreadable",
        "its mode 0311 was made 0711 and still it could not be listed: nothing below it "
        f"could be checked; to put it back: chmod 0311 {locked}")]


def test_a_link_swapped_in_is_never_opened_up(tmp_path: Path) -> None:
    # The walk enters no link, but a directory can be replaced by one between its
    # listing and the chmod: the mode changed must be the directory's, or nothing's.
    (tmp_path / "target").mkdir()
    (tmp_path / "target").chmod(0o311)
    (tmp_path / "lib").symlink_to(tmp_path / "target")
    assert aftermath._open_up(str(tmp_path / "lib")) is None
    assert mode(tmp_path / "target") == 0o311


def test_in_a_git_directory_it_is_opened_and_the_git_directory_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gitdir = tmp_path / "sub" / ".git"
    repository(gitdir)
    (gitdir / "logs").mkdir()
    (gitdir / "logs" / "HEAD").write_text("")
    (gitdir / "logs").chmod(0o311)
    (tmp_path / "bare").mkdir()
    repository(tmp_path / "bare" / "b.git")
    since = later()
    (tmp_path / "bare" / "b.git").chmod(0o311)
    as_the_kernel_lists(monkeypatch)
    found = scan(tmp_path, since)
    assert [(f.kind, f.path) for f in found] == [
        ("unreadable", "sub/.git/logs"), ("git", "bare/b.git"), ("git", "sub/.git")]
    assert f"chmod 0311 {gitdir / 'logs'}" in found[0].note
    # A git directory that was itself shut carries the note on its own finding.
    assert found[1].note.startswith("its mode 0311 was made 0711 so that")
    assert mode(gitdir / "logs") == mode(tmp_path / "bare" / "b.git") == 0o711


def test_report_lines_show_each_note_after_its_path(tmp_path: Path) -> None:
    findings = (Finding("a", "unreadable", "its mode 0311 was made 0711 so that what it "
                        "holds was checked; to put it back: chmod 0311 /w/a"),
                Finding("b\x1b[2J", "unreadable", "nothing below it could be checked"))
    line = aftermath.report_lines(findings, None)[0]
    assert (": a (its mode 0311 was made 0711 so that what it holds was checked; to put it "
            "back: chmod 0311 /w/a), b\\x1b[2J (nothing below it could be checked); ") in line
    full = tmp_path / "list"
    aftermath.report_lines(findings, str(full), limit=1)
    assert full.read_text().splitlines() == [
        "unreadable\ta\tits mode 0311 was made 0711 so that what it holds was checked; to "
        "put it back: chmod 0311 /w/a",
        "unreadable\tb\\x1b[2J\tnothing below it could be checked"]


_AS_NOBODY = """
import json, sys
from claude_sandbox.launch.overlay import aftermath
found = aftermath.scan([sys.argv[1]], int(sys.argv[2]), frozenset({".git"}))
print(json.dumps([[f.kind, f.path, f.note] for f in found]))
"""


@pytest.fixture
def nobodys(tmp_path: Path) -> Iterator[Path]:
    """A directory the unprivileged user owns and can reach (tmp_path's parents are
    root's own, mode 0700)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to run the scan as another user")
    top = Path(tempfile.mkdtemp(prefix="aftermath-unlisted-"))
    try:
        yield top
    finally:
        shutil.rmtree(top)


def test_the_kernel_refuses_and_the_walk_opens_up_as_an_unprivileged_user(
        nobodys: Path) -> None:
    workspace = nobodys / "ws"
    for name in ("shut", "blind"):  # 0311: no listing; 0600: names, but nothing opens
        repository(workspace / name / "repo" / ".git")
    since = later()
    for name in ("shut", "blind"):
        plant_hook(workspace / name / "repo" / ".git")
    for path in (nobodys, *nobodys.rglob("*")):
        os.lchown(path, NOBODY, NOBODY)
    os.chmod(nobodys, 0o755)
    (workspace / "shut").chmod(0o311)
    (workspace / "blind").chmod(0o600)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         sys.executable, "-c", _AS_NOBODY, str(workspace), str(since)],
        env={"PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"},
        cwd="/", capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == [
        ["unreadable", "blind", "its mode 0600 was made 0700 so that what it holds was "
         f"checked; to put it back: chmod 0600 {workspace / 'blind'}"],
        ["unreadable", "shut", "its mode 0311 was made 0711 so that what it holds was "
         f"checked; to put it back: chmod 0311 {workspace / 'shut'}"],
        ["git", "blind/repo/.git", ""], ["git", "shut/repo/.git", ""]]
