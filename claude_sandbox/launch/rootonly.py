"""Root is not a skeleton key: on a root launch, find what the owner keeps from others.

Launched as root, the agent is uid 0, the owner of /etc/shadow, host keys,
other users' 0700 homes and every root-only file, and dropping capabilities
does not change ownership. An identity inside that cannot read them would also
lose the root-owned workspace, so they are hidden instead (ADR 0006): every
entry outside the workspace without the other-read bit (a directory: without
other-read or other-search) is covered with an empty one before the agent
starts (the late-mount helper, procmask.py).

Finding them takes a walk of the whole tree, about a second on a dev
container's image, so the result is cached in root's state store with the
modification time of every directory walked. A launch re-lists only the
directories whose time changed (a file created, renamed or removed there), so
a new secret is found at the next launch. A mode changed in place (chmod) does
not change the directory's time: the cache is rebuilt in full when it is more
than a day old. All of it runs in the late-mount helper while bwrap sets up.
"""

from __future__ import annotations

import os
import stat
import time

from claude_sandbox.core import mountinfo
from claude_sandbox.launch import state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from claude_sandbox.launch.hostfacts import HostFacts
    from claude_sandbox.launch.mounts import Writable

CACHE_NAME = "root-only.json"
MAX_AGE = 24 * 3600
# Pseudo and per-boot file systems: not files an administrator keeps.
PSEUDO_FS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "devtmpfs",
                       "debugfs", "tracefs", "securityfs", "pstore", "bpf", "configfs",
                       "fusectl", "hugetlbfs", "binfmt_misc", "autofs", "nsfs", "efivarfs",
                       "selinuxfs", "rpc_pipefs"})


def _private(mode: int) -> bool:
    if stat.S_ISDIR(mode):
        return mode & 0o005 != 0o005
    if stat.S_ISLNK(mode):
        return False
    return not mode & 0o004


def _scan(directory: str, skip: frozenset[str], hidden: dict[str, bool],
          dirs: dict[str, int]) -> None:
    """Walk `directory`: record private entries (not descending into them) and dir times."""
    stack = [directory]
    while stack:
        current = stack.pop()
        try:
            dirs[current] = os.lstat(current).st_mtime_ns
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            path = entry.path
            if path in skip:
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if _private(mode):
                hidden[path] = stat.S_ISDIR(mode)
            elif stat.S_ISDIR(mode):
                stack.append(path)


def refresh(hidden: dict[str, bool], dirs: dict[str, int], skip: Iterable[str]) -> bool:
    """Re-list, in place, the directories whose time changed; whether any did."""
    skipped = frozenset(skip)
    changed = [d for d, mtime in dirs.items() if _mtime(d) != mtime]
    for directory in changed:
        prefix = directory.rstrip("/") + "/"
        for path in [p for p in hidden if p.startswith(prefix)]:
            del hidden[path]
        for path in [d for d in dirs if d.startswith(prefix) or d == directory]:
            del dirs[path]
    for directory in changed:
        if os.path.isdir(directory) and not os.path.islink(directory):
            _scan(directory, skipped, hidden, dirs)
    return bool(changed)


def _mtime(path: str) -> int:
    try:
        return os.lstat(path).st_mtime_ns
    except OSError:
        return -1


def load(path: str) -> tuple[dict[str, bool], dict[str, int], float] | None:
    import json

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return ({str(k): bool(v) for k, v in data["hidden"].items()},
                {str(k): int(v) for k, v in data["dirs"].items()}, float(data["made"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def save(path: str, hidden: dict[str, bool], dirs: dict[str, int], made: float) -> None:
    import json

    temporary = f"{path}.{os.getpid()}"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w",
              encoding="utf-8") as handle:
        json.dump({"hidden": hidden, "dirs": dirs, "made": made}, handle)
    os.replace(temporary, path)


def private_paths(cache: str, skip: list[str]) -> dict[str, bool]:
    """What to hide on this root launch: the cache, brought up to date, or a new walk of
    the whole tree from /, minus `skip` (and below)."""
    loaded = load(cache)
    now = time.time()
    if loaded is None or now - loaded[2] > MAX_AGE:
        hidden: dict[str, bool] = {}
        dirs: dict[str, int] = {}
        _scan("/", frozenset(skip), hidden, dirs)
        save(cache, hidden, dirs, now)
        return hidden
    hidden, dirs, made = loaded
    if refresh(hidden, dirs, skip):
        save(cache, hidden, dirs, made)
    return hidden


def for_launch(state_dir: str | None, facts: HostFacts, layout: Writable) -> dict[str, bool]:
    """On a root launch: the paths outside the workspace root keeps from others (py)."""
    store = state.store_root(state_dir, facts.home, facts.uid)
    pseudo = [m.mountpoint for m in mountinfo.parse(mountinfo.read())
              if m.fstype in PSEUDO_FS and m.mountpoint != "/"]
    masked = [*facts.runtime_dirs, "/run", "/proc", "/sys", "/dev", "/tmp", facts.home, store]
    # The workspace is walked too (and only filtered below): a cache made from another
    # workspace must know the root-only files of this one.
    skip = [*masked, *pseudo]
    private = private_paths(os.path.join(store, CACHE_NAME), skip)
    shown = [*masked, layout.workspace, *layout.allow_write]
    return {path: is_dir for path, is_dir in private.items()
            if not any(path == r or path.startswith(r.rstrip("/") + "/") for r in shown)}
