"""The root-only walk in a child of its own: its answer reaches the helper whole or not at
all, and ending it early leaves no process and no half-written cache."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import pytest

from claude_sandbox.launch import rootonly, rootwalk


def _walk(tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch, found: Any,
          write: Any = None) -> rootwalk.Walk:
    monkeypatch.setattr(rootonly, "for_launch", lambda *_: (found(), write))
    facts = SimpleNamespace(home=str(tmp_path), uid=os.getuid())
    return rootwalk.Walk(str(tmp_path), facts, SimpleNamespace())  # type: ignore[arg-type]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_answer_arrives_whole(tmp_path: os.PathLike[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    answer = {"/etc/shadow": False, "/root/.ssh": True, "/srv/a\nb": False,
              "/srv/\udcff": True}
    walk = _walk(tmp_path, monkeypatch, lambda: answer)
    assert walk.result() == answer
    walk.end(wait=True)
    assert _gone(walk.pid)


def test_nothing_to_hide_is_an_answer(tmp_path: os.PathLike[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    walk = _walk(tmp_path, monkeypatch, dict)
    assert walk.result() == {}
    walk.end(wait=True)


def test_a_walk_that_fails_refuses_rather_than_hides_less(
        tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def failing() -> dict[str, bool]:
        raise OSError(13, "denied")

    walk = _walk(tmp_path, monkeypatch, failing)
    with pytest.raises(OSError, match="did not finish"):
        walk.result()
    walk.end(wait=True)


def test_the_cache_is_written_after_the_answer(tmp_path: os.PathLike[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    marker = os.path.join(str(tmp_path), "written")
    walk = _walk(tmp_path, monkeypatch, lambda: {"/x": False},
                 lambda: open(marker, "w").close())
    assert walk.result() == {"/x": False}
    walk.end(wait=True)
    assert os.path.exists(marker)


def test_ending_it_early_leaves_no_process_and_no_half_written_file(
        tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch torn down while the child still writes its cache: the child is killed,
    and what it had begun to write is removed."""
    store = os.path.join(str(tmp_path), str(os.getuid()))
    os.makedirs(os.path.join(store, f"{rootonly.CACHE_NAME}.d"))

    def slow_write() -> None:
        pid = os.getpid()
        open(os.path.join(store, f"{rootonly.CACHE_NAME}.{pid}"), "w").close()
        open(os.path.join(store, f"{rootonly.CACHE_NAME}.d", f"abc.{pid}"), "w").close()
        time.sleep(30)

    walk = _walk(tmp_path, monkeypatch, lambda: {"/x": False}, slow_write)
    assert walk.result() == {"/x": False}
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(store, f"{rootonly.CACHE_NAME}.{walk.pid}")):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    walk.end(wait=False)
    assert _gone(walk.pid)
    assert os.listdir(store) == [f"{rootonly.CACHE_NAME}.d"]
    assert os.listdir(os.path.join(store, f"{rootonly.CACHE_NAME}.d")) == []


def test_an_answer_no_one_reads_does_not_hold_up_the_end(
        tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper never came (a launch refused before bwrap): the child's answer, larger
    than a pipe holds, fails to write once the launcher closes its end."""
    walk = _walk(tmp_path, monkeypatch, lambda: {f"/p/{i:06}": False for i in range(50_000)})
    start = time.monotonic()
    walk.end(wait=True)
    assert time.monotonic() - start < 10
    assert _gone(walk.pid)
