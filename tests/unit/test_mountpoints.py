"""The mount points below $HOME are made in the store without following a link (mountpoints.py).

Each refusal test also asserts what the user relies on: nothing was made where the link
leads, outside the store.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.launch.planner import pins
from claude_sandbox.launch.planner.mounts import Mount
from claude_sandbox.launch.session import mountpoints

HOME = "/home/u"


def _store(tmp_path: Path) -> tuple[Path, Path, Path]:
    store, outside, source = tmp_path / "store", tmp_path / "outside", tmp_path / "source"
    for directory in (store, outside, source):
        directory.mkdir()
    (source / "file").write_text("x")
    return store, outside, source


def _make(store: Path, *mounts: Mount) -> dict[str, int]:
    """As a launch makes them: $HOME's bind first, the store bound there."""
    made = mountpoints.make(str(store), HOME, (Mount("bind", HOME, "r", source=str(store)),
                                                *mounts), "claude")
    for fd in made.values():
        os.close(fd)
    return made


def test_missing_points_are_made_as_bwrap_would_find_them(tmp_path: Path) -> None:
    store, _, source = _store(tmp_path)
    _make(store,
          Mount("ro-bind", f"{HOME}/.local/bin/claude", "r", source=str(source / "file")),
          Mount("ro-bind", f"{HOME}/.config/gh", "r", source=str(source)),
          Mount("data", f"{HOME}/.netrc", "r", source="netrc"),
          Mount("tmpfs", f"{HOME}/.cache/t", "r"),
          Mount("symlink", f"{HOME}/.a/b/link", "r", source="/target"))
    assert (store / ".local/bin/claude").is_file()
    assert (store / ".config/gh").is_dir()
    assert (store / ".netrc").is_file()
    assert (store / ".cache/t").is_dir()
    assert (store / ".a/b").is_dir() and not (store / ".a/b/link").exists()  # bwrap's to make


def test_what_is_there_already_stands(tmp_path: Path) -> None:
    store, _, source = _store(tmp_path)
    (store / ".local/bin").mkdir(parents=True)
    (store / ".local/bin/claude").write_text("kept")
    _make(store, Mount("ro-bind", f"{HOME}/.local/bin/claude", "r", source=str(source / "file")))
    assert (store / ".local/bin/claude").read_text() == "kept"


def test_mounts_elsewhere_make_nothing_and_missing_sources_only_their_parents(
        tmp_path: Path) -> None:
    """A bind whose source is missing is bwrap's to skip or refuse: its point is not made,
    but the directories above it are, which the plan pins whatever is below them (a
    scratch directory made after the plan once left a pin without its descriptor)."""
    store, _, source = _store(tmp_path)
    mounts = (Mount("bind", HOME, "r", source=str(store)),
              Mount("ro-bind", "/etc/x", "r", source=str(source / "file")),
              Mount("ro-bind-try", f"{HOME}/.nope/x", "r", source=str(source / "missing")),
              Mount("remount-ro", f"{HOME}/.ro/x", "r"))
    made = mountpoints.make(str(store), HOME, mounts, "claude")
    try:
        assert sorted(os.listdir(store)) == [".nope", ".ro"]
        assert os.listdir(store / ".nope") == [] and os.listdir(store / ".ro") == []
        assert sorted(made) == sorted(pins.pin_name(d) for d in pins.pinned(HOME, mounts))
    finally:
        for fd in made.values():
            os.close(fd)


def test_a_mount_below_another_bind_is_not_the_stores(tmp_path: Path) -> None:
    """The workspace under $HOME: its own mount point is the store's, what is mounted
    below it is made in the workspace, which bwrap has bound there by then."""
    store, _, source = _store(tmp_path)
    made = _make(store, Mount("bind", f"{HOME}/src/ws", "r", source=str(source)),
                 Mount("ro-bind", f"{HOME}/src/ws/.vscode", "r", source=str(source)))
    assert (store / "src/ws").is_dir() and not (store / "src/ws/.vscode").exists()
    assert list(made) == [pins.pin_name(f"{HOME}/src")]


def test_the_directories_above_mount_points_are_pinned_shallow_first(tmp_path: Path) -> None:
    store, _, source = _store(tmp_path)
    mounts = (Mount("bind", HOME, "r", source=str(store)),
              Mount("ro-bind", f"{HOME}/.local/bin/claude", "r", source=str(source / "file")),
              Mount("ro-bind", f"{HOME}/.config/gh", "r", source=str(source)),
              Mount("data", f"{HOME}/.netrc", "r", source="d"))
    assert pins.pinned(HOME, mounts) == [f"{HOME}/.config", f"{HOME}/.local",
                                                f"{HOME}/.local/bin"]
    made = mountpoints.make(str(store), HOME, mounts, "claude")
    try:
        assert sorted(made) == sorted(pins.pin_name(d)
                                      for d in pins.pinned(HOME, mounts))
        for name, fd in made.items():  # each the store's directory, opened where it is
            relative = name[len(pins.pin_name(HOME)) + 1:]
            assert os.path.samestat(os.fstat(fd), os.stat(store / relative))
    finally:
        for fd in made.values():
            os.close(fd)


def test_a_link_above_a_mount_point_is_refused_and_not_followed(tmp_path: Path) -> None:
    store, outside, source = _store(tmp_path)
    (store / ".local").symlink_to(outside)  # the agent's plant: ~/.local leads out
    with pytest.raises(SandboxError) as refused:
        _make(store, Mount("ro-bind", f"{HOME}/.local/bin/claude", "r",
                           source=str(source / "file")))
    assert refused.value.status == EXIT_REFUSED
    assert "~/.local in claude's state store is a symbolic link" in str(refused.value)
    assert "state reset --agent claude" in str(refused.value)
    assert os.listdir(outside) == []


@pytest.mark.parametrize("kind", ["ro-bind", "data"])
def test_a_link_at_a_file_mount_point_is_refused_and_not_followed(tmp_path: Path,
                                                                  kind: str) -> None:
    store, outside, source = _store(tmp_path)
    (store / ".local/bin").mkdir(parents=True)
    (store / ".local/bin/claude").symlink_to(outside / "made")  # dangling: O_CREAT would make it
    with pytest.raises(SandboxError, match="is a symbolic link"):
        _make(store, Mount(kind, f"{HOME}/.local/bin/claude", "r",
                           source=str(source / "file") if kind == "ro-bind" else "d"))
    assert os.listdir(outside) == []


def test_a_link_at_a_directory_mount_point_is_refused(tmp_path: Path) -> None:
    store, outside, source = _store(tmp_path)
    (store / ".config").mkdir()
    (store / ".config/gh").symlink_to(outside)
    said = re.escape("~/.config/gh in claude's state store is a symbolic")
    with pytest.raises(SandboxError, match=said):
        _make(store, Mount("ro-bind", f"{HOME}/.config/gh", "r", source=str(source)))


def test_the_wrong_kind_is_refused(tmp_path: Path) -> None:
    store, _, source = _store(tmp_path)
    (store / ".local").write_text("a file where a directory goes")
    with pytest.raises(SandboxError, match="is not what the sandbox mounts there"):
        _make(store, Mount("ro-bind", f"{HOME}/.local/bin/claude", "r",
                           source=str(source / "file")))
    (store / ".netrc").mkdir()
    said = re.escape("~/.netrc in claude's state store is not what")
    with pytest.raises(SandboxError, match=said):
        _make(store, Mount("data", f"{HOME}/.netrc", "r", source="d"))
