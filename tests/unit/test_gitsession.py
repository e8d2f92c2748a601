"""Sessions a killed launcher left: told from live ones by their lock, kept or removed.

Real files and real locks in a temporary store; a live session's lock is held by a
child process, as a launcher would hold it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from claude_sandbox.launch.overlay import gitcheck, gitsession
from claude_sandbox.launch.planner.overlays import View


def _view(tmp_path: Path) -> View:
    gitdir = tmp_path / "repo" / ".git"
    (gitdir / "refs" / "heads").mkdir(parents=True)
    (gitdir / "objects").mkdir()
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
    (gitdir / "config").write_text("[core]\n\tbare = false\n")
    store = tmp_path / "store" / "git" / "0"
    store.mkdir(parents=True)
    return View("git", str(gitdir), str(store), "test")


def _session(view: View, name: str, wrote: bool, lock: bool = True) -> Path:
    directory = Path(view.store, "sessions", name)
    (directory / "upper").mkdir(parents=True)
    (directory / "work" / "work").mkdir(parents=True)
    (directory / "work" / "work").chmod(0)  # as overlayfs leaves it
    if lock:
        (directory / "lock").write_text("")
    if wrote:
        (directory / "upper" / "ORIG_HEAD").write_text("0" * 40 + "\n")
    return directory


def _prepare(view: View) -> tuple[gitsession.Layer, gitcheck.Quarantine]:
    quarantine = gitcheck.Quarantine(os.path.dirname(view.store))
    (layer,) = gitsession.prepare([view], quarantine)
    return layer, quarantine


def test_an_interrupted_session_that_wrote_is_kept_aside_and_named(tmp_path: Path) -> None:
    view = _view(tmp_path)
    _session(view, "a1", wrote=True)
    layer, quarantine = _prepare(view)
    kept = [p for p in Path(view.store, "kept").iterdir()]
    assert len(kept) == 1 and (kept[0] / "upper" / "ORIG_HEAD").is_file()
    assert not (kept[0] / "work").exists()  # overlayfs's scratch is not kept
    assert any(f"kept in {kept[0] / 'upper'}" in line for line in quarantine.lines)
    # Only this launch's own session is left, and it is new and empty.
    assert [p.name for p in Path(view.store, "sessions").iterdir()] == \
        [os.path.basename(os.path.dirname(layer.upper))]
    assert os.listdir(layer.upper) == []


def test_one_that_wrote_nothing_is_removed_without_a_word(tmp_path: Path) -> None:
    view = _view(tmp_path)
    _session(view, "b2", wrote=False)
    _, quarantine = _prepare(view)
    assert not Path(view.store, "kept").exists()
    assert not Path(view.store, "sessions", "b2").exists()
    assert quarantine.lines == []


def test_a_session_made_before_locks_is_treated_as_interrupted(tmp_path: Path) -> None:
    view = _view(tmp_path)
    _session(view, "536", wrote=True, lock=False)
    _prepare(view)
    assert not Path(view.store, "sessions", "536").exists()
    assert len(list(Path(view.store, "kept").iterdir())) == 1


def test_a_live_session_is_left_alone_whatever_its_name(tmp_path: Path) -> None:
    """Its launcher holds the lock: a reused process ID or a second launch in the same
    workspace must not take its upper directory from under it."""
    view = _view(tmp_path)
    live = _session(view, str(os.getpid()), wrote=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
         str(live / "lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        _, quarantine = _prepare(view)
        assert (live / "upper" / "ORIG_HEAD").is_file()
        assert not Path(view.store, "kept").exists() and quarantine.lines == []
    finally:
        holder.communicate("")


def test_the_launch_holds_its_own_lock_until_finish(tmp_path: Path) -> None:
    view = _view(tmp_path)
    layer, quarantine = _prepare(view)
    lock = os.open(os.path.join(os.path.dirname(layer.upper), "lock"), os.O_RDWR)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            raise AssertionError("the session's lock was free while it ran")
        except BlockingIOError:
            pass
    finally:
        os.close(lock)
    gitsession.finish([layer], str(tmp_path / "repo"), quarantine)
    assert not os.path.exists(os.path.dirname(layer.upper))


def test_remove_tree_takes_deep_closed_trees_and_follows_no_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a session left: deeper than the interpreter's stack, a directory of mode 000
    (overlayfs' work directory), links to what is not ours, which stay."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine\n")
    top = tmp_path / "session"
    deep = top / "upper"
    deep.mkdir(parents=True)
    for _ in range(max(sys.getrecursionlimit() + 200, 2500)):  # past PATH_MAX too
        deep = deep / "d"
        os.mkdir(deep)  # one level at a time: a path this long is past PATH_MAX
        monkeypatch.chdir(deep)
        deep = Path(".")
    monkeypatch.chdir(tmp_path)
    work = top / "work" / "work"
    work.mkdir(parents=True)
    (work / "f").write_text("x")
    work.chmod(0)
    (top / "link").symlink_to(outside)
    (top / "file-link").symlink_to(outside / "keep")
    gitsession.remove_tree(str(top))
    assert not top.exists()
    assert (outside / "keep").read_text() == "mine\n"


def test_remove_tree_given_a_link_removes_the_link_alone(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "closed").mkdir(parents=True)
    (victim / "closed").chmod(0o500)
    link = tmp_path / "session"
    link.symlink_to(victim)
    gitsession.remove_tree(str(link))
    assert not os.path.lexists(link)
    assert (victim / "closed").stat().st_mode & 0o777 == 0o500
