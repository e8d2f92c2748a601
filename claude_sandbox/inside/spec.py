"""What crosses from the launcher to the inner stage: one record, over a descriptor.

The launcher's plan holds an `Inner` (launch/planner/plan.py); `encode` writes it once,
with the run-time descriptor numbers, into a memfd that bwrap passes into the
sandbox; the inner stage reads it back (`_enter` with `decode`, inside/enter.c with the
same checks in C), checking every field before
anything is applied. Nothing else crosses: not the agent's argv on bwrap's
command line, not a flag per writable path.

The wire form is core/wire.py's fields: for each field of the record in order, its
name, the count of its values, then the values (a path or an argument never holds NUL). Not
JSON: importing `json` costs the inner stage about 6 ms at every launch (it
pulls in `re` and `enum`); not `marshal`: it allocates what a malformed length
asks for before reading it. `decode` takes only the fields below, in order,
each of its own type, and never allocates more than the input it was given.
This module is imported by the inner stage, so its record is core/record.py's,
not a dataclass or a named tuple (ADR 0004: `dataclasses` and `collections`
cost the inner stage milliseconds at every launch).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum
import os

from claude_sandbox.core import wire
from claude_sandbox.core.errors import EXIT_USAGE, SandboxError
from claude_sandbox.core.record import record

LEVELS = ("standard", "harsh", "brokered")
# The terminal signals bwrap ignores so that the agent decides (process.SESSION_IGNORED);
# kept ignored for the agent only where the launch itself inherited them ignored.
TERMINAL_SIGNALS = {"int": _signal.SIGINT, "quit": _signal.SIGQUIT, "hup": _signal.SIGHUP,
                    "term": _signal.SIGTERM}
_INT_MAX = (1 << 63) - 1  # what setrlimit takes
LIMIT = 1 << 20  # the encoded record: far above any real plan, far below memory trouble


@record
class Inner:
    level: str  # the Landlock level (and the seccomp filter's, applied by bwrap)
    max_pids: int | None = None  # RLIMIT_NPROC, counted in the sandbox's user namespace
    max_memory: int | None = None  # RLIMIT_DATA, per process
    writable: tuple[str, ...] = ()  # every path the sandbox can write
    exec_files: tuple[str, ...] = ()  # programs bound read-only inside writable trees
    keep_ignored: tuple[str, ...] = ()  # TERMINAL_SIGNALS the launch inherited ignored
    late_masks: bool = False  # ask the launcher's helper for the late masks (procmask.py)
    command: tuple[str, ...] = ()  # the agent's argv; argv[0] absolute
    # brokered only (inside/broker.py): read-only in the agent's view, writable through
    # the command server; the shells the client stands in for; the agent's grants.
    commands_only: tuple[str, ...] = ()
    shells: tuple[str, ...] = ()
    agent_writable: tuple[str, ...] = ()
    agent_exec: tuple[str, ...] = ()
    agent_connect: tuple[int, ...] = ()  # TCP ports the agent may connect to
    agent_bind: tuple[int, ...] = ()  # TCP ports it may listen on (callback-port)
    offline_commands: bool = False  # each command in a network namespace of its own


FIELDS = (*Inner.__annotations__, "helper_fd")


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def encode(inner: Inner, helper_fd: int | None) -> bytes:
    """The wire form: the record's fields and the helper's descriptor number."""
    tokens: list[str] = []
    for name in FIELDS:
        value = helper_fd if name == "helper_fd" else getattr(inner, name)
        values = list(value) if isinstance(value, tuple) else [] if value is None else [value]
        texts = [_text(item) for item in values]
        if any("\0" in text for text in texts):
            raise SandboxError(f"{name}: a value holds a NUL byte", EXIT_USAGE)
        tokens += [name, str(len(texts)), *texts]
    return wire.pack(tokens)


def _bad(what: str) -> SandboxError:
    return SandboxError(f"_enter: the launcher's plan is malformed: {what}", EXIT_USAGE)


def _count(token: str, left: int) -> int:
    if not token.isascii() or not token.isdigit() or len(token) > 7 or int(token) > left:
        raise _bad("a count is not a number of values that follow")
    return int(token)


def _int(values: list[str], name: str) -> int | None:
    if not values:
        return None
    if len(values) != 1 or not values[0].isascii() or not values[0].isdigit() \
            or len(values[0]) > 19 or int(values[0]) > _INT_MAX:
        raise _bad(f"{name} must be a non-negative integer")
    return int(values[0])


def _paths(values: list[str], name: str) -> tuple[str, ...]:
    if not all(value.startswith("/") for value in values):
        raise _bad(f"{name} must be absolute paths")
    return tuple(values)


def _ports(values: list[str], name: str) -> tuple[int, ...]:
    ports = tuple(_int([value], name) or 0 for value in values)
    if not all(0 < port < 65536 for port in ports):
        raise _bad(f"{name} must be TCP ports")
    return ports


def decode(data: bytes) -> tuple[Inner, int | None]:
    """Inverse of `encode`, refusing anything the launcher would not have written."""
    try:
        tokens = wire.unpack(data, LIMIT)
    except wire.WireError:
        raise _bad("too long, or cut short") from None
    fields: dict[str, list[str]] = {}
    at = 0
    for name in FIELDS:
        if tokens[at : at + 1] != [name] or at + 1 >= len(tokens):
            raise _bad(f"expected the field {name}")
        count = _count(tokens[at + 1], len(tokens) - at - 2)
        fields[name] = tokens[at + 2 : at + 2 + count]
        at += 2 + count
    if at != len(tokens):
        raise _bad("unexpected fields after the record")
    level = fields["level"]
    if len(level) != 1 or level[0] not in LEVELS:
        raise _bad(f"unknown level {level!r}")
    if not set(fields["keep_ignored"]) <= set(TERMINAL_SIGNALS):
        raise _bad("keep_ignored must name terminal signals")
    for flag in ("late_masks", "offline_commands"):
        if fields[flag] not in (["0"], ["1"]):
            raise _bad(f"{flag} must be 0 or 1")
    command = fields["command"]
    if not command or not command[0].startswith("/"):
        raise _bad("the agent must be named by absolute path")
    inner = Inner(
        level=level[0],
        max_pids=_int(fields["max_pids"], "max_pids"),
        max_memory=_int(fields["max_memory"], "max_memory"),
        writable=_paths(fields["writable"], "writable"),
        exec_files=_paths(fields["exec_files"], "exec_files"),
        keep_ignored=tuple(fields["keep_ignored"]),
        late_masks=fields["late_masks"] == ["1"],
        command=tuple(command),
        commands_only=_paths(fields["commands_only"], "commands_only"),
        shells=_paths(fields["shells"], "shells"),
        agent_writable=_paths(fields["agent_writable"], "agent_writable"),
        agent_exec=_paths(fields["agent_exec"], "agent_exec"),
        agent_connect=_ports(fields["agent_connect"], "agent_connect"),
        agent_bind=_ports(fields["agent_bind"], "agent_bind"),
        offline_commands=fields["offline_commands"] == ["1"],
    )
    if (inner.level == "brokered") != bool(inner.shells and inner.agent_exec) or (
            inner.offline_commands and inner.level != "brokered"):
        raise _bad("the brokered fields belong to the brokered level, and it needs them")
    helper_fd = _int(fields["helper_fd"], "helper_fd")
    if helper_fd is not None and helper_fd < 3:
        raise _bad("helper_fd must not be a standard stream")
    if inner.late_masks != (helper_fd is not None):
        raise _bad("late_masks and helper_fd disagree")
    return inner, helper_fd


def read(fd: int) -> tuple[Inner, int | None]:
    """Read the whole record from `fd` (the launcher's memfd) and close it."""
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

