"""A directory in a git directory that cannot be listed is named, opened up and checked.

git outside needs only to search `logs/` to append to `logs/HEAD`; a mode of
0311 hid a link there (to ~/.bashrc) from every walk of ours, and the user's
next `git checkout -b 'x;cmd;'` appended a command line through it. Root lists
any directory, so the refusal to list is made by replacing os.scandir for the
one path: the tests behave the same for every user.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from claude_sandbox.launch.overlay import gitcheck, gitrepo


def _gitdir(tmp_path: Path) -> tuple[Path, Path]:
    gitdir = tmp_path / "sub" / ".git"
    for name in ("objects", "refs/heads", "logs", "hooks"):
        (gitdir / name).mkdir(parents=True)
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
    bashrc = tmp_path / "home" / ".bashrc"
    bashrc.parent.mkdir()
    bashrc.write_text("# the user's\n")
    (gitdir / "logs" / "HEAD").symlink_to(bashrc)
    return gitdir, bashrc


def _unlistable(monkeypatch: pytest.MonkeyPatch, path: Path, times: int = -1) -> None:
    """os.scandir refuses `path` as it would a 0311 directory for its owner: `times`
    times (-1: always)."""
    real: Callable[..., Iterator[os.DirEntry[str]]] = os.scandir
    left = [times]

    def scandir(where: str) -> Iterator[os.DirEntry[str]]:
        if os.path.normpath(where) == str(path) and left[0] != 0:
            left[0] -= 1
            raise PermissionError(13, "Permission denied", where)
        return real(where)

    monkeypatch.setattr(os, "scandir", scandir)


def test_walk_names_what_it_could_not_list(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    gitdir, _ = _gitdir(tmp_path)
    _unlistable(monkeypatch, gitdir / "logs")
    unlisted: list[str] = []
    names = [name for name, _ in gitrepo.walk(str(gitdir), unlisted=unlisted)]
    assert "logs" in names and "logs/HEAD" not in names
    assert unlisted == ["logs"]
    # Without the list, walk is as it was for its other callers: the directory skipped.
    assert "logs/HEAD" not in [name for name, _ in gitrepo.walk(str(gitdir))]


def test_not_plain_names_a_directory_it_cannot_list(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    gitdir, _ = _gitdir(tmp_path)
    assert list(gitcheck.not_plain(str(gitdir))) == [str(gitdir / "logs" / "HEAD")]
    _unlistable(monkeypatch, gitdir / "logs")
    assert list(gitcheck.not_plain(str(gitdir))) == [str(gitdir / "logs")]


def test_not_plain_names_the_git_directory_itself(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    gitdir, _ = _gitdir(tmp_path)
    _unlistable(monkeypatch, gitdir)
    assert list(gitcheck.not_plain(str(gitdir))) == [str(gitdir)]


def test_check_opens_it_up_and_takes_what_it_hid(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    gitdir, bashrc = _gitdir(tmp_path)
    os.chmod(gitdir / "logs", 0o311)
    _unlistable(monkeypatch, gitdir / "logs", times=1)  # listable once its mode is git's
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    gitcheck.check(str(gitdir), quarantine)
    assert not os.path.lexists(gitdir / "logs" / "HEAD")
    assert stat.S_IMODE(os.stat(gitdir / "logs").st_mode) == 0o711
    assert bashrc.read_text() == "# the user's\n"
    opened, moved = quarantine.lines
    assert opened.startswith(f"made {gitdir / 'logs'} listable") and "chmod 0311 " in opened
    assert moved.startswith(f"moved {gitdir / 'logs' / 'HEAD'} (a symbolic link")


def test_check_ends_when_a_directory_stays_unlisted(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    gitdir, _ = _gitdir(tmp_path)
    _unlistable(monkeypatch, gitdir / "logs")
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    gitcheck.check(str(gitdir), quarantine)
    # Its mode already lets its owner list it: nothing to open, so a warning, once.
    (line,) = quarantine.lines
    assert line.startswith(f"warning: {gitdir / 'logs'} is a directory that cannot be listed")


def test_a_directory_that_cannot_be_made_listable_is_warned_of(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gitdir, _ = _gitdir(tmp_path)
    _unlistable(monkeypatch, gitdir / "logs")

    def chmod(path: str, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted", path)

    monkeypatch.setattr(os, "chmod", chmod)
    quarantine = gitcheck.Quarantine(str(tmp_path / "store"))
    gitcheck.check(str(gitdir), quarantine)
    (line,) = quarantine.lines
    assert line.startswith(f"warning: {gitdir / 'logs'} is a directory that cannot be listed")


@pytest.mark.skipif(os.geteuid() == 0, reason="root lists a 0311 directory anyway")
def test_a_real_0311_directory(tmp_path: Path) -> None:
    gitdir, bashrc = _gitdir(tmp_path)
    os.chmod(gitdir / "logs", 0o311)
    assert list(gitcheck.not_plain(str(gitdir))) == [str(gitdir / "logs")]
    gitcheck.check(str(gitdir), gitcheck.Quarantine(str(tmp_path / "store")))
    assert not os.path.lexists(gitdir / "logs" / "HEAD")
    assert bashrc.read_text() == "# the user's\n"
