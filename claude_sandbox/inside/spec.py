"""What crosses from the launcher to the inner stage: one record, as JSON over a descriptor.

The launcher's plan holds an `Inner` (launch/plan.py); `encode` writes it once,
with the run-time descriptor numbers, into a pipe that bwrap passes into the
sandbox; `_enter` reads it back with `decode`, which checks every field before
anything is applied. Nothing else crosses: not the agent's argv on bwrap's
command line, not a flag per writable path.

This module is imported by the inner stage at every launch, so it uses
`collections.namedtuple` and `json`, not `typing` or `dataclasses` (ADR 0004).
"""

from __future__ import annotations

import json
import os
from collections import namedtuple

from claude_sandbox.core.errors import EXIT_USAGE, SandboxError

TYPE_CHECKING = False

LEVELS = ("standard", "harsh")
# The terminal signals bwrap ignores so that the agent decides (process.SESSION_IGNORED);
# kept ignored for the agent only where the launch itself inherited them ignored.
SIGNAL_NAMES = ("int", "quit", "hup", "term")
LIMIT = 1 << 20  # the encoded record: far above any real plan, far below memory trouble

if TYPE_CHECKING:
    from typing import NamedTuple

    class Inner(NamedTuple):
        level: str  # the Landlock level (and the seccomp filter's, applied by bwrap)
        max_pids: int | None = None  # RLIMIT_NPROC, counted in the sandbox's user namespace
        max_memory: int | None = None  # RLIMIT_DATA, per process
        writable: tuple[str, ...] = ()  # every path the sandbox can write
        exec_files: tuple[str, ...] = ()  # programs bound read-only inside writable trees
        keep_ignored: tuple[str, ...] = ()  # SIGNAL_NAMES the launch inherited ignored
        late_masks: bool = False  # ask the launcher's helper for the late masks (procmask.py)
        command: tuple[str, ...] = ()  # the agent's argv; argv[0] absolute

else:
    Inner = namedtuple(
        "Inner",
        "level max_pids max_memory writable exec_files keep_ignored late_masks command",
        defaults=(None, None, (), (), (), False, ()),
    )


def encode(inner: Inner, helper_fd: int | None) -> bytes:
    """The wire form: the record's fields and the helper's descriptor number."""
    fields = dict(inner._asdict(), helper_fd=helper_fd)
    return json.dumps(fields, separators=(",", ":")).encode()


def _bad(what: str) -> SandboxError:
    return SandboxError(f"_enter: the launcher's plan is malformed: {what}", EXIT_USAGE)


def _paths(value: object, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(p, str) and p.startswith("/") and "\0" not in p for p in value
    ):
        raise _bad(f"{name} must be a list of absolute paths")
    return tuple(value)


def _cap(value: object, name: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise _bad(f"{name} must be a non-negative integer or null")
    return value


def decode(data: bytes) -> tuple[Inner, int | None]:
    """Inverse of `encode`, refusing anything the launcher would not have written."""
    if len(data) > LIMIT:
        raise _bad("too long")
    try:
        fields = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        raise _bad("not JSON") from None
    if not isinstance(fields, dict) or set(fields) != {*Inner._fields, "helper_fd"}:
        raise _bad("unexpected or missing fields")
    if fields["level"] not in LEVELS:
        raise _bad(f"unknown level {fields['level']!r}")
    keep = fields["keep_ignored"]
    if not isinstance(keep, list) or not set(keep) <= set(SIGNAL_NAMES):
        raise _bad("keep_ignored must name terminal signals")
    if type(fields["late_masks"]) is not bool:
        raise _bad("late_masks must be true or false")
    command = fields["command"]
    if not isinstance(command, list) or not command or not all(
        isinstance(a, str) and "\0" not in a for a in command
    ) or not command[0].startswith("/"):
        raise _bad("the agent must be named by absolute path")
    inner = Inner(
        level=fields["level"],
        max_pids=_cap(fields["max_pids"], "max_pids"),
        max_memory=_cap(fields["max_memory"], "max_memory"),
        writable=_paths(fields["writable"], "writable"),
        exec_files=_paths(fields["exec_files"], "exec_files"),
        keep_ignored=tuple(keep),
        late_masks=fields["late_masks"],
        command=tuple(command),
    )
    helper_fd = _cap(fields["helper_fd"], "helper_fd")
    if inner.late_masks != (helper_fd is not None):
        raise _bad("late_masks and helper_fd disagree")
    return inner, helper_fd


def read(fd: int) -> tuple[Inner, int | None]:
    """Read the whole record from `fd` (a pipe the launcher filled and closed) and close it."""
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if sum(map(len, chunks)) > LIMIT:
                break
    except OSError as error:
        raise _bad(f"descriptor {fd} cannot be read ({error.strerror})") from None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    return decode(b"".join(chunks))

