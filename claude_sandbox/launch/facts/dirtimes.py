"""Which cached directories changed since the root-only walk read them: their times, read
by two processes when there are many.

A root launch's refresh (rootonly.py) reads the time of every directory it cached: one
`lstat` each, tens of thousands on a host with toolchains, and all of it kernel time
(ADR 0015). That is most of what a root launch costs over a user's. It runs in the
late-mount helper from the launch's start (rootcache.prefetch), beside the launcher's
planning; a forked child reads every other directory. A child that fails, or cannot be made,
leaves its half to be read here: no directory goes unread.
"""

from __future__ import annotations

import os

from claude_sandbox.core import process

# Below this a fork costs more than the half it saves (about 1.6 ms against 1.5-3.5 us a
# directory, measured).
SPLIT_FROM = 4096
_DONE = b"done\0"


def _read(paths: list[str], times: dict[str, int]) -> set[str]:
    # One loop without a call of ours per directory: the interpreter's share was about a
    # third of the kernel's (1.2 us a directory, measured).
    found = set()
    lstat = os.lstat
    for path in paths:
        try:
            if lstat(path).st_mtime_ns != times[path]:
                found.add(path)
        except OSError:  # gone, or no longer reachable: its time reads as -1
            if times[path] != -1:
                found.add(path)
    return found


def changed(paths: list[str], times: dict[str, int]) -> set[str]:
    """The `paths` whose time is no longer the one `times` holds (a missing one: -1)."""
    if len(paths) < SPLIT_FROM:
        return _read(paths, times)
    theirs, ours = paths[1::2], paths[0::2]
    parent = os.getpid()
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return _read(paths, times)
    try:
        child = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return _read(paths, times)
    if child == 0:
        status = 1
        try:
            # Nothing but its pipe: not the helper's socket, nor anything else.
            os.closerange(0, write_end)
            os.closerange(write_end + 1, os.sysconf("SC_OPEN_MAX"))
            if process.tie_to_parent(parent):  # never outlives the launch
                listing = "\0".join(sorted(_read(theirs, times)))
                with open(write_end, "wb") as out:
                    out.write(_DONE + listing.encode("utf-8", "surrogateescape"))
                status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    found = _read(ours, times)
    with open(read_end, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(child, 0)
    if status != 0 or not answer.startswith(_DONE):
        return found | _read(theirs, times)
    listed = answer[len(_DONE):].decode("utf-8", "surrogateescape")
    return found | {path for path in listed.split("\0") if path}
