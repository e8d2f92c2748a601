"""Which cached directories changed since the root-only walk read them: their times,
read by the compiled reader, or here by two processes when there are many.

A root launch's refresh (rootonly.py) reads the time of every directory it cached: one
`lstat` each, tens of thousands on a host with toolchains (ADR 0015). That is most of
what a root launch costs over a user's. It runs in the late-mount helper from the
launch's start (rootcache.prefetch), beside the launcher's planning.

The installer builds a reader in C (dirtimes.c, docs/adr/0019-the-directory-times-in-c.md):
`start` runs it on the flat file of times the cache keeps beside it, `finish` takes its
answer. Where it is missing, or its answer is not whole and for this cache, the times
are read here (`changed`): a forked child reads every other directory, and a child that
fails, or cannot be made, leaves its half to be read here. No directory goes unread.
"""

from __future__ import annotations

import os

from claude_sandbox.core import process, spawn
from claude_sandbox.core.paths import DIR_TIMES
from claude_sandbox.core.record import record

# A directory's two times in one int, as the cache keeps them (nanoseconds, as the kernel
# keeps them): the status-change time above, the modification time below. A directory
# differs when either does: only the kernel sets the first, where the owner may set the
# second back (utimensat); a file system whose status-change time is not one (a fixed
# value, a creation time) still keeps the second.
_LOW = 1 << 128


def stamp(info: os.stat_result) -> int:
    """`info`'s two times, as the cache keeps them."""
    return info.st_ctime_ns * _LOW + info.st_mtime_ns % _LOW


def split(when: int) -> tuple[int, int]:
    """A stamp's status-change and modification times."""
    changed, low = divmod(when, _LOW)
    return changed, low - _LOW if low >= _LOW >> 1 else low


# Below this a fork costs more than the half it saves (about 1.6 ms against 1.5-3.5 us a
# directory, measured).
SPLIT_FROM = 4096
_DONE = b"done\0"
_REFUSED = 65  # the reader's status for a times file it would not read (dirtimes.c)


def _read(paths: list[str], times: dict[str, int]) -> set[str]:
    # One loop without a call of ours per directory: the interpreter's share was about a
    # third of the kernel's (1.2 us a directory, measured).
    found = set()
    lstat, low = os.lstat, _LOW
    for path in paths:
        try:
            info = lstat(path)
            if info.st_ctime_ns * low + info.st_mtime_ns % low != times[path]:
                found.add(path)
        except OSError:  # gone, or no longer reachable: the walk drops it
            found.add(path)
    return found


def changed(paths: list[str], times: dict[str, int]) -> set[str]:
    """The `paths` whose time is no longer the one `times` holds, or that are gone."""
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
            process.close_all_but({write_end})
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


@record
class Reading:
    """The compiled reader started, and the read end of its answer."""

    child: process.Child
    fd: int


def start(times_file: str) -> Reading | None:
    """Start the compiled reader on `times_file`; None where it is not installed or
    cannot be started (the caller then reads the times itself)."""
    reader = DIR_TIMES
    # Run as root on every root launch: only the installer's own program.
    if not spawn.installed_program(reader):
        return None
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            # Tied to this helper, which the reader checks again itself (dirtimes.c).
            child = process.fork_exec([reader, times_file, str(os.getpid())], {},
                                      {0: null, 1: write_end, 2: null}, setsid=False,
                                      die_with_parent=True)
        finally:
            os.close(null)
    except OSError:
        os.close(read_end)
        return None
    finally:
        os.close(write_end)
    return Reading(child, read_end)


def finish(reading: Reading, token: str, count: int) -> tuple[set[str] | None, bool]:
    """The changed directories the reader found, or None unless it read all `count` of
    them from the times of the cache `token` names (then the caller reads them itself);
    and whether it refused the file or read another cache's (then it is written again)."""
    with open(reading.fd, "rb") as pipe:
        answer = pipe.read()
    status = reading.child.wait()
    if status != 0:
        return None, status == _REFUSED
    head, _, rest = answer.partition(b"\0")
    read, _, listed = rest.partition(b"\0")
    if head != token.encode("ascii") or read != str(count).encode("ascii"):
        return None, True
    return {os.fsdecode(path) for path in listed.split(b"\0") if path}, False


def cancel(reading: Reading) -> None:
    """End a reader whose answer is not wanted (no cache to refresh), and reap it."""
    reading.child.kill()
    os.close(reading.fd)
    reading.child.wait()
