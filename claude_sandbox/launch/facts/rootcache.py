"""The root-only walk's cache (rootonly.py), and its first half read early.

The cache is read on every root launch: fields split by NUL (a path holds none) load in
less time than JSON did on 37,000 directories (16-19 against 21-27 ms, measured), and are
written by joins in C. The magic, when it was made, how many covers, then each cover's
path and 1 (a directory) or 0, then each directory's path and time.

Reading it and the time of every directory it holds needs nothing of the launch's plan,
and is most of what a root launch pays (ADR 0015): `prefetch` does it in the late-mount
helper as soon as the launch knows it runs as root, while the launcher plans
(launch/session/procmask.py); the rest waits for the plan.
"""

from __future__ import annotations

import os
import time

from claude_sandbox.core.record import record
from claude_sandbox.launch.facts import dirtimes

# -5: directories judged right by right (rootonly.py lists the earlier ones, removed).
CACHE_NAME = "root-only-5"
_MAGIC = "claude-sandbox root-only 5"
# A mode changed in place (chmod) does not change a directory's time: past this age the
# cache is rebuilt in full.
MAX_AGE = 24 * 3600

Loaded = tuple[dict[str, bool], dict[str, int], float]  # covers, directory times, made


def load(path: str) -> Loaded | None:
    try:
        with open(path, "rb") as handle:
            parts = handle.read().decode("utf-8", "surrogateescape").split("\0")
        if parts[0] != _MAGIC:
            return None
        made, count = float(parts[1]), int(parts[2])
        covers, times = parts[3:3 + 2 * count], parts[3 + 2 * count:]
        if len(covers) != 2 * count or len(times) % 2:
            return None
        return (dict(zip(covers[0::2], (flag == "1" for flag in covers[1::2]), strict=True)),
                dict(zip(times[0::2], map(int, times[1::2]), strict=True)), made)
    except (OSError, ValueError, IndexError):
        return None


def save(path: str, hidden: dict[str, bool], dirs: dict[str, int], made: float) -> None:
    temporary = f"{path}.{os.getpid()}"
    text = "\0".join([_MAGIC, repr(made), str(len(hidden)),
                      *(f"{name}\0{1 if is_dir else 0}" for name, is_dir in hidden.items()),
                      *(f"{name}\0{mtime}" for name, mtime in dirs.items())])
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        handle.write(text.encode("utf-8", "surrogateescape"))
    os.replace(temporary, path)


@record
class Prefetched:
    """The cache as read (None: none, or unreadable), and which of its directories' times
    changed since (None: it is too old to refresh, and is rebuilt)."""

    loaded: Loaded | None
    changed: frozenset[str] | None


def prefetch(path: str) -> Prefetched:
    """Load the cache and read the time of every directory it holds, before the plan: what
    rootonly.private_paths would do first, whatever the plan says."""
    loaded = load(path)
    if loaded is None or not loaded[1] or time.time() - loaded[2] > MAX_AGE:
        return Prefetched(loaded, None)
    return Prefetched(loaded, frozenset(dirtimes.changed(list(loaded[1]), loaded[1])))
