"""The egress record: every connection and DNS query of a session, kept outside the sandbox.

One file a session, `STORE/egress/WORKSPACE-KEY/SESSION.jsonl`, in the user's 0700
state store, which the sandbox does not see (only each agent's home below it is
bound inside). The launcher creates the file and hands the proxy its descriptor;
the proxy appends one JSON object a line, with O_APPEND writes of one line each,
so lines from its threads never interleave. The first line describes the session;
every other line is one connection or one query:

    {"kind": "session", "session": ID, "agent": ..., "policy": ..., "workspace": ...,
     "time": UTC}
    {"kind": "tls" | "http" | "tcp" | "dns", "time": UTC, "name": NAME | null,
     "port": N, "address": ORIGINAL, "upstream": ADDRESS | null,
     "verdict": "allowed" | "refused", "rule": WHY, "fix": LINE, "sent": N,
     "received": N, "seconds": S}

`claude-sandbox log` reads it (launch/session/egresslog.py); the session's end reads it for
its one-line summary and, under `egress-policy = learn`, the lines that would have
allowed the session (docs/explanation/egress-by-name.md).
"""

from __future__ import annotations

import fcntl
import os
import stat
import time

from claude_sandbox.core import paths
from claude_sandbox.jail.egresspolicy import WEB_PORTS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from typing import Any

SUFFIX = ".jsonl"
KINDS = ("tls", "http", "tcp", "dns")
# A session's record stops growing here (a flood of refused connections must not fill
# the user's disk); the last line says so.
MAX_BYTES = 64 << 20
# A workspace's records kept, newest first, when a session ends: both bounds hold. One
# agent's flood is cut at MAX_BYTES a session; this bounds what its sessions add up to.
KEEP_SESSIONS = 100
KEEP_BYTES = 256 << 20


def directory(store: str, workspace: str) -> str:
    """Where the records of `workspace`'s sessions are, in the user's state store."""
    return os.path.join(store, "egress", paths.workspace_key(workspace))


def session_id(now: float | None = None, pid: int | None = None) -> str:
    """A session's name: when it started (UTC) and the launcher's pid; sorts by time."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{os.getpid() if pid is None else pid}"


def utc(now: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))


def create(where: str, header: Mapping[str, Any]) -> tuple[str, int]:
    """Make the session's record file in `where` (0600, never an existing one, never
    through a link); (path, descriptor). The caller made `where` the user's own, 0700."""
    path = os.path.join(where, str(header["session"]) + SUFFIX)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    # Held while any descriptor of this open file lives (the launcher's, and the proxy's,
    # passed over its socket): `prune` in another launch, in any pid namespace that
    # shares the store (another container with the same home), sees the session running.
    fcntl.flock(fd, fcntl.LOCK_SH)
    os.write(fd, line({"kind": "session", **header}))
    return path, fd


# JSON string escapes: the two JSON requires, and every control and non-ASCII character
# as \uXXXX (a name is the agent's bytes; the line must stay one line of ASCII).
_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\"}


def _string(text: str) -> str:
    out = []
    for char in text.translate(_ESCAPES):
        code = ord(char)
        if 0x20 <= code < 0x7F:
            out.append(char)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:  # a surrogate pair
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
    return '"' + "".join(out) + '"'


def _value(value: object) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    return _string(str(value))


def line(entry: Mapping[str, Any]) -> bytes:
    """One record line: a flat JSON object, written without the json module (the proxy
    imports nothing it can do without: its start overlaps the launch's)."""
    fields = ",".join(f"{_string(str(key))}:{_value(value)}" for key, value in entry.items())
    return ("{" + fields + "}\n").encode("ascii")


def read(path: str) -> list[dict[str, Any]]:
    """Every well-formed entry of a record; a line cut short (a killed proxy) is skipped."""
    from claude_sandbox.core import jsontext

    entries = []
    scan = jsontext.scanner()
    with open(path, "rb") as f:
        for raw in f:
            try:
                found = jsontext.values(raw.decode("utf-8"), scan)
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                continue
            if len(found) == 1 and isinstance(found[0], dict):
                entries.append(found[0])
    return entries


def sessions(where: str) -> list[str]:
    """The record files in a workspace's directory, oldest first."""
    try:
        names = sorted(name for name in os.listdir(where) if name.endswith(SUFFIX))
    except FileNotFoundError:
        return []
    return [os.path.join(where, name) for name in names]


def prune(where: str, current: str) -> int:
    """Remove a workspace's oldest records past KEEP_SESSIONS or KEEP_BYTES, newest kept
    first; never `current`, nor one a running session may still write (_running). How
    many were removed."""
    found = []
    for path in sessions(where):
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found.append((path, info.st_size))
    kept, size, removed = 0, 0, 0
    for path, length in reversed(found):  # newest first
        kept, size = kept + 1, size + length
        if (kept <= KEEP_SESSIONS and size <= KEEP_BYTES) or path == current \
                or _running(path):
            continue
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed


def _running(path: str) -> bool:
    """Whether a session may still write `path`: its lock (create) is held, or, for a
    record made without one, the launcher its name ends with runs in this pid namespace."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        pass
    finally:
        os.close(fd)
    pid = os.path.basename(path)[:-len(SUFFIX)].rpartition("-")[2]
    return pid.isdigit() and os.path.exists(f"/proc/{pid}")


def refused(entries: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [e for e in entries if e.get("kind") in KINDS and e.get("verdict") == "refused"]


def shown(text: object) -> str:
    """`text` safe for a terminal: a name is the agent's bytes, and a refused DNS name may
    hold any of them (a carriage return, an escape sequence)."""
    return "".join(c if c.isascii() and c.isprintable() else repr(c)[1:-1].replace("'", "")
                   or "?" for c in str(text))


def _target(entry: Mapping[str, Any]) -> str:
    name = entry.get("name") or entry.get("address") or "?"
    port = entry.get("port")
    return shown(f"{name}:{port}" if entry.get("kind") != "dns" and port else name)


def summary(entries: list[dict[str, Any]]) -> str | None:
    """The session end's one line: what was refused, or None when nothing was."""
    denied = refused(entries)
    if not denied and not any(e.get("kind") == "cut" for e in entries):
        return None
    targets = list(dict.fromkeys(_target(e) for e in denied))
    if any(e.get("kind") == "cut" for e in entries):
        targets.append("the record reached its size limit and stops there")
    shown = ", ".join(targets[:5]) + (f" and {len(targets) - 5} more" if len(targets) > 5 else "")
    count = len(denied)
    return (f"egress: {count} connection{'s' if count != 1 else ''} or quer"
            f"{'ies' if count != 1 else 'y'} refused ({shown}); `claude-sandbox log` "
            "shows each with the line that would allow it")


def learned(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """The lines that would have allowed every connection of a session: allow-domain for a
    name the connection really went to, allow-ip for one made by number or to an address
    its claimed name does not have (a name the agent only claimed is never offered)."""
    from claude_sandbox.jail.egresspolicy import RuleError, parse_rule

    lines: list[str] = []
    for entry in entries:
        name, port, address = entry.get("name"), entry.get("port"), entry.get("address")
        if entry.get("kind") not in ("tls", "http", "tcp") or entry.get("verdict") != "allowed":
            continue
        if not name or entry.get("claimed"):
            if address:
                lines.append(f"allow-ip = {shown(address)}")
            continue
        line = f"{name}{'' if port in WEB_PORTS else f':{port}'}"
        try:
            parse_rule(str(line))
        except RuleError:
            continue
        lines.append(f"allow-domain = {line}")
    return list(dict.fromkeys(lines))


def iter_connections(entries: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    return (e for e in entries if e.get("kind") in KINDS)
