"""After the session: report control files the agent created or changed below the top.

The top of each writable root holds its control files read-only (controlfiles.py),
but a mount can only hold a path that exists, and a subdirectory can gain one:
`sub/.mcp.json`, `sub/.claude/settings.json`, `vendor/lib/.git` (a repository
with its own config and hooks), `sub/.pi/extensions`. Programs started outside
in that subdirectory read them. Nothing at launch can stop their creation, so
the launcher reports them when the session ends, one line each, with a time
budget: a very large workspace is reported as not fully searched (ADR 0005).

A change is told by the inode's change time, which a process cannot set back
(utimensat sets only the access and modification times).
"""

from __future__ import annotations

import os
import stat
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

BUDGET = 1.0  # seconds


def scan(roots: Iterable[str], names: frozenset[str], since_ns: int) -> tuple[list[str], bool]:
    """Paths below each root (not at its top) named in `names` and changed since `since_ns`,
    and directories anywhere (the top included) that became bare git repositories.

    Returns (found, complete). Symbolic links are not followed; a changed
    entry's subtree is not searched further.
    """
    deadline = time.monotonic() + BUDGET
    found: list[str] = []
    for root in roots:
        stack = [(root, 0)]
        while stack:
            if time.monotonic() > deadline:
                return found, False
            directory, depth = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if depth >= 1 and entry.name in names and _changed(entry.path, info, since_ns):
                    found.append(entry.path)
                    continue
                if entry.name == "HEAD" and _bare_repository(directory, since_ns):
                    found.append(directory)  # a git directory in its own right (bare)
                    continue
                if stat.S_ISDIR(info.st_mode) and entry.name != ".git":
                    stack.append((entry.path, depth + 1))
    return found, True


def _bare_repository(directory: str, since_ns: int) -> bool:
    """`directory` looks like a git directory (HEAD, objects/, refs/, config) that the
    session made or changed: git run there outside would use its config and hooks."""
    parts = [os.path.join(directory, n) for n in ("HEAD", "objects", "refs", "config")]
    if not all(os.path.lexists(p) for p in parts) or directory.endswith("/.git"):
        return False
    try:
        return any(os.lstat(p).st_ctime_ns >= since_ns for p in parts)
    except OSError:
        return False


def _changed(path: str, info: os.stat_result, since_ns: int) -> bool:
    """The entry, or anything one level inside it (settings.json, hooks/), changed since."""
    if info.st_ctime_ns >= since_ns:
        return True
    if not stat.S_ISDIR(info.st_mode):
        return False
    try:
        with os.scandir(path) as inner:
            return any(child.stat(follow_symlinks=False).st_ctime_ns >= since_ns
                       for child in inner)
    except OSError:
        return False


def report_lines(found: list[str], complete: bool) -> list[str]:
    lines = [f"the session created or changed {path}: programs started outside in that "
             "directory read it; review it before running them there" for path in found]
    if not complete:
        lines.append(f"the search for control files changed in the session stopped after "
                     f"{BUDGET:.0f} s; the workspace is too large to search fully")
    return lines
