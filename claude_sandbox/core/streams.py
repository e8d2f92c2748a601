"""The standard descriptors a process of the package was started without.

A launch started with one of them closed (`claude 2>&-`, a supervisor that closes stdin)
would hand that number to the next descriptor it opens: the launch bundle's, a pipe of
the janitor's, a socket of the jail's. What is meant for the user would then go there,
or fail once that descriptor is closed again, and a launch ended with a Python error
instead of the session's status. The shims show it at once: bash opens the shim's own
script at the lowest free number, keeps it open there read-only across the exec, and the
interpreter binds its stderr to that file, where every message fails (EBADF).
"""

from __future__ import annotations

import fcntl
import os
import sys

_STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def _usable(fd: int, mode: str) -> bool:
    """Whether `fd` is open, for writing where `mode` writes."""
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return False
    return mode == "r" or flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)


def null_at(fd: int) -> None:
    """/dev/null at `fd`, over whatever is there, inheritable as a standard stream is."""
    null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd` where it is closed
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
    os.set_inheritable(fd, True)


def fill_closed() -> None:
    """Put /dev/null at each standard descriptor that is closed (or, for output, open
    only for reading), and bind its stream to it. Called by the package's __init__,
    before anything of ours is opened: from then on no standard stream is None."""
    for fd, name, mode in _STREAMS:
        if not _usable(fd, mode):
            null_at(fd)
            setattr(sys, name, open(fd, mode, encoding="utf-8",  # noqa: SIM115  # the stream
                                    errors="backslashreplace", closefd=False))


def flush() -> None:
    """Write what standard output and error hold, before a fork or an _exit; a stream
    that cannot take it (a closed pipe) loses only that text."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def terminal_safe(text: str) -> str:
    """`text` as one line a terminal shows and nothing more: a control character or an
    invisible code point (an escape sequence, a carriage return, a right-to-left
    override), which a name the agent chose may hold, is written as its escape."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(c if c.isascii() and c.isprintable()
                   else c.encode("unicode_escape").decode("ascii") for c in text)
