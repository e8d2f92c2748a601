"""The root-only walk's cache (rootonly.py), and its first half read early.

The cache is read on every root launch, in marshal's form: a magic line, the file's
whole length (8 bytes, big endian: a file cut short or grown is refused), then when it
was made, the covers (a path: whether it is a directory) and every directory's time. On
37,000 directories marshal loads in 11-14 ms where fields split by NUL took 22-28 and
JSON more. marshal trusts its input, and this file is root's own, in root's private
store (0700), written whole and renamed into place: only root writes it, and a file
that is not exactly what `save` wrote is refused by its length and its types, then
rebuilt.

Reading it and the time of every directory it holds needs nothing of the launch's plan,
and is most of what a root launch pays (ADR 0015): `prefetch` does it in the late-mount
helper as soon as the launch knows it runs as root, while the launcher plans
(launch/session/procmask.py); the rest waits for the plan.
"""

from __future__ import annotations

import marshal
import os
import time

from claude_sandbox.core.record import record
from claude_sandbox.launch.facts import dirtimes

# -6: marshal's form; -5: directories judged right by right (rootonly.py lists the earlier
# ones, removed).
CACHE_NAME = "root-only-6"
_MAGIC = b"claude-sandbox root-only 6\n"
# A mode changed in place (chmod) does not change a directory's time: past this age the
# cache is rebuilt in full.
MAX_AGE = 24 * 3600

Loaded = tuple[dict[str, bool], dict[str, int], float]  # covers, directory times, made


def load(path: str) -> Loaded | None:
    """The cache, or None where it is missing or not exactly what `save` wrote."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        head = len(_MAGIC) + 8
        if not data.startswith(_MAGIC) or int.from_bytes(data[len(_MAGIC):head]) != len(data):
            return None
        made, hidden, dirs = marshal.loads(data[head:])
    except (OSError, ValueError, TypeError, EOFError, MemoryError):
        return None
    if (type(made) is not float or type(hidden) is not dict or type(dirs) is not dict
            or not set(map(type, hidden)) <= {str} or not set(map(type, dirs)) <= {str}
            or not set(map(type, hidden.values())) <= {bool}
            or not set(map(type, dirs.values())) <= {int}):
        return None
    return hidden, dirs, made


def save(path: str, hidden: dict[str, bool], dirs: dict[str, int], made: float) -> None:
    body = marshal.dumps((made, hidden, dirs))
    size = len(_MAGIC) + 8 + len(body)
    temporary = f"{path}.{os.getpid()}"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        handle.write(_MAGIC + size.to_bytes(8) + body)
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
