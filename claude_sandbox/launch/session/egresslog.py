"""`claude-sandbox log`: show a session's egress record (jail/egressrecord.py).

The records are in the user's state store, outside the sandbox, so the agent cannot
rewrite them; but the names in them are what the agent sent (a TLS server name, an
HTTP Host, a DNS query), so every field is printed with control, non-printable and
non-ASCII characters escaped: a record must not drive the terminal, nor pass a
look-alike name off as another.
"""

from __future__ import annotations

import json
import os
import re

from claude_sandbox.core.errors import EXIT_USAGE, SandboxError
from claude_sandbox.jail import egressrecord
from claude_sandbox.launch.configure import config, profiles
from claude_sandbox.launch.facts import hostfacts
from claude_sandbox.launch.session import state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

EXIT_NONE = 1  # no record to show: no jailed session has run in this workspace
_SHOWN_IDS = 10  # an unknown --session lists at most this many of the newest ids
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # egressrecord.utc's form
_WIDE = 48  # a column is padded to its longest cell, up to this; one long name widens no other


def run(session: str | None, *, agent: str | None, as_json: bool, listing: bool,
        environ: Mapping[str, str]) -> int:
    """The `log` subcommand; its exit status."""
    name = profiles.get(agent).name if agent else environ.get("CLAUDE_SANDBOX_AGENT", "claude")
    cfg = config.load(name, environ)
    # Where the launch puts the record: the same workspace root, resolved the same way.
    workspace = os.path.realpath(cfg.workspace_root or os.getcwd())
    store = state.store_root(cfg.state_dir, hostfacts.login_home(), os.getuid())
    paths = egressrecord.sessions(egressrecord.directory(store, workspace))
    try:
        if agent:  # the session lines alone: a record may be large
            paths = [path for path in paths if _first(path).get("agent") == agent]
        if not paths:
            whose = f" of {agent}" if agent else ""
            raise SandboxError(f"no egress record{whose} for {_safe(workspace, path=True)} "
                               "(no jailed session has run here)", EXIT_NONE)
        ids = [_id(path) for path in paths]
        if listing:
            rows = [list_row(_id(path), egressrecord.read(path)) for path in paths]
            print(json.dumps(rows, indent=2) if as_json else "\n".join(_list_lines(rows)))
            return 0
        sid = pick(ids, session)
        entries = egressrecord.read(paths[ids.index(sid)])
    except OSError as exc:
        raise SandboxError(f"cannot read the egress record {_safe(exc.filename, path=True)}: "
                           f"{exc.strerror or exc}", EXIT_NONE) from None
    print(as_document(sid, entries) if as_json else "\n".join(text_lines(sid, entries)))
    return 0


def _id(path: str) -> str:
    return os.path.basename(path)[: -len(egressrecord.SUFFIX)]


def _first(path: str) -> dict[str, Any]:
    """A record's session line, read alone; {} when it is not one."""
    with open(path, "rb") as f:
        raw = f.readline(1 << 16)
    try:
        entry = json.loads(raw)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) and entry.get("kind") == "session" else {}


def pick(ids: Sequence[str], session: str | None) -> str:
    """The session asked for by id, or the newest; an unknown id names those there are."""
    if session is None:
        return ids[-1]
    if session in ids:
        return session
    shown = list(ids[-_SHOWN_IDS:])
    more = f"the newest {len(shown)}: " if len(ids) > len(shown) else ""
    raise SandboxError(f"no session {_safe(session)} in this workspace's egress record "
                       f"({more}{', '.join(_safe(i) for i in shown)}; "
                       "`claude-sandbox log --list` lists them)", EXIT_USAGE)


def header(sid: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The session line; a record whose first line was lost still has its file's id."""
    first = dict(entries[0]) if entries and entries[0].get("kind") == "session" else {}
    first.setdefault("session", sid)
    return first


def as_document(sid: str, entries: Sequence[Mapping[str, Any]]) -> str:
    # ensure_ascii: every control character comes out as a \u escape, never raw.
    body = [dict(e) for e in entries if e.get("kind") != "session"]
    return json.dumps({"session": header(sid, entries), "entries": body}, indent=2,
                      ensure_ascii=True)


def list_row(sid: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    head = header(sid, entries)
    count = sum(1 for _ in egressrecord.iter_connections(entries))
    return {"session": sid, "agent": head.get("agent"), "policy": head.get("policy"),
            "time": head.get("time"), "entries": count,
            "refused": len(egressrecord.refused(entries))}


def _list_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    cells = [["session", "agent", "policy", "entries", "refused"]]
    cells += [[_safe(row[key]) for key in ("session", "agent", "policy", "entries", "refused")]
              for row in rows]
    return _columns(cells, right=(3, 4))


def text_lines(sid: str, entries: list[dict[str, Any]]) -> list[str]:
    """The record as a person reads it: the session, a row an entry, what was refused."""
    head = header(sid, entries)
    lines = [f"session {_safe(head['session'])}  agent {_safe(head.get('agent', '?'))}  "
             f"policy {_safe(head.get('policy', '?'))}  "
             f"workspace {_safe(head.get('workspace', '?'), path=True)}  "
             f"started {_safe(head.get('time', '?'))} (times UTC)"]
    # A row of one cell is a note between the rows: it takes no column's width.
    cells = [["time", "kind", "verdict", "to", "upstream", "sent", "received", "rule"]]
    day = str(head.get("time") or "")[:10]
    for entry in entries:
        kind = entry.get("kind")
        if kind == "cut":
            cells.append([f"(the record stops here: {_safe(entry.get('why'))})"])
        if kind not in egressrecord.KINDS:
            continue
        stamp = str(entry.get("time") or "")
        if _ISO.fullmatch(stamp) and stamp[:10] != day:  # the session ran past midnight
            day = stamp[:10]
            cells.append([f"-- {day}"])
        cells.append(_row(entry))
        if entry.get("verdict") == "refused" and entry.get("fix"):
            cells.append([f"    allow with: {_safe(entry['fix'])}"])
    lines += _columns(cells, right=(5, 6))
    if len(cells) == 1:
        lines.append("(no connection and no query)")
    told = egressrecord.summary(entries)
    # Its pointer to this command says nothing here.
    lines.append(_safe(told.partition("; `claude-sandbox log`")[0]) if told
                 else "egress: nothing was refused")
    if head.get("policy") == "learn":
        lines.append("lines that would allow this session:")
        lines += _learned(egressrecord.learned(entries))
    return lines


def _learned(found: Sequence[str]) -> list[str]:
    """The lines to paste (egressrecord.learned offers only lines that parse, and no name
    the agent merely claimed); shown escaped all the same."""
    return [f"  {_safe(line)}" for line in found] or ["  (none: no connection was made)"]


def _row(entry: Mapping[str, Any]) -> list[str]:
    port = entry.get("port")
    target = entry.get("name") or entry.get("address") or "?"
    if entry.get("kind") != "dns" and port:
        target = f"{target}:{port}"
    rule = str(entry.get("rule") or "")
    if entry.get("cut"):
        rule += "; still open when the session ended"
    if entry.get("terminated"):  # the credential broker's (docs/explanation/credentials.md)
        rule += f"; brokered: {_size(entry.get('injected'))} credential(s) put back"
    if entry.get("other_sentinels"):
        rule += f"; {_size(entry.get('other_sentinels'))} sentinel(s) sent here unreplaced"
    stamp = str(entry.get("time") or "")
    return [_safe(stamp[11:19] if _ISO.fullmatch(stamp) else stamp), _safe(entry.get("kind")),
            _safe(entry.get("verdict")), _safe(target), _safe(entry.get("upstream") or "-"),
            _size(entry.get("sent")), _size(entry.get("received")), _safe(rule)]


def _size(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        return "-" if value is None else _safe(value)
    if value < 1024:
        return str(value)
    size, unit = value / 1024, "K"
    for bigger in "MG":
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f}{unit}"


def _columns(cells: Sequence[Sequence[str]], right: tuple[int, ...] = ()) -> list[str]:
    """Rows of cells joined in columns; the last column is never padded."""
    count = max(len(row) for row in cells)
    widths = [min(_WIDE, max(len(row[i]) for row in cells if len(row) == count))
              for i in range(count)]
    lines = []
    for row in cells:
        parts = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                 for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*parts, row[-1]]).rstrip())
    return lines


def _safe(value: object, *, path: bool = False) -> str:
    """`value` as text a terminal shows and does not obey, repr-like: a backslash, a
    control character or any other non-printable one (bidirectional marks too) becomes
    an escape. Outside ASCII too, unless it is a path of the user's: a name that looks
    like another (a Cyrillic a in a domain) must not pass for it."""
    text = "" if value is None else str(value)
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char.isprintable() and (path or char.isascii()):
            out.append(char)
        else:
            out.append(char.encode("unicode_escape").decode("ascii"))
    return "".join(out)
