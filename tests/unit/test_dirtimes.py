"""The root-only refresh's reading of directory times: every changed directory is found,
whether one process reads them or two, and whatever the second one does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from claude_sandbox.core import process
from claude_sandbox.launch.facts import dirtimes


def _tree(top: Path, count: int) -> tuple[list[str], dict[str, int]]:
    paths = []
    for index in range(count):
        path = top / f"d{index // 100}" / f"e{index}"
        path.mkdir(parents=True)
        paths.append(str(path))
    return paths, {path: os.lstat(path).st_mtime_ns for path in paths}


def _change(paths: list[str], times: dict[str, int], every: int) -> set[str]:
    """Make a file in every `every`th directory, remove a few others, name their (ns)
    times again so that even a coarse clock sees the change."""
    touched = set()
    for index, path in enumerate(paths):
        if index % every == 0:
            Path(path, "new").touch()
            os.utime(path, ns=(times[path] + 10**9, times[path] + 10**9))
            touched.add(path)
        elif index % every == 1 and index % 7 == 0:
            os.rmdir(path)
            touched.add(path)
    return touched


@pytest.mark.parametrize("count", [50, dirtimes.SPLIT_FROM + 3])
def test_every_changed_or_removed_directory_is_found(tmp_path: Path, count: int) -> None:
    paths, times = _tree(tmp_path, count)
    assert dirtimes.changed(paths, times) == set()
    touched = _change(paths, times, 37)
    assert dirtimes.changed(paths, times) == touched


def test_a_child_that_fails_leaves_its_half_to_the_parent(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    paths, times = _tree(tmp_path, dirtimes.SPLIT_FROM + 1)
    touched = _change(paths, times, 11)
    assert any(paths.index(p) % 2 for p in touched)  # the child's half has changes
    # The child cannot tie itself to the parent (so it writes nothing and exits 1).
    monkeypatch.setattr(process, "tie_to_parent", lambda parent: False)
    assert dirtimes.changed(paths, times) == touched


def test_no_fork_leaves_it_all_to_the_parent(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    paths, times = _tree(tmp_path, dirtimes.SPLIT_FROM)
    touched = _change(paths, times, 13)

    def refused() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    assert dirtimes.changed(paths, times) == touched


def test_a_name_with_any_bytes_comes_back_from_the_child(tmp_path: Path) -> None:
    paths, times = _tree(tmp_path, dirtimes.SPLIT_FROM)
    odd = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"na\xffme\nline"))
    os.mkdir(odd)
    paths.insert(1, odd)  # the child's half
    times[odd] = -5
    assert dirtimes.changed(paths, times) == {odd}
