"""The client's side of a redirected connection: what it sends first, and its refusal.

The egress proxy (egressproxy.py) judges a connection by what the client sends
before anything is connected upstream: a TLS ClientHello's server name, an HTTP
request head's Host. Every byte is the agent's: the wait, the size (the parsers'
bounds) and the number of pieces are bounded. A refused client is told in its own
protocol: a TLS access_denied alert, an HTTP 403 that names the rule and the line
that would allow it, and for anything else a reset, never a clean end that could
read as served (checks 75, 79).
"""

from __future__ import annotations

import _socket
import _struct as struct  # struct.py only re-exports it: a module less to find (ADR 0004)
import time

from claude_sandbox.core.paths import CONFIG_FILE
from claude_sandbox.jail import httphead, tlshello

FIRST_WAIT = 10.0  # seconds a client has to send its ClientHello or request head
_READ = 16 << 10
# Reads a client may split its first bytes into (each read parses from the start).
_PIECES = 32


def refuse_tcp(conn: _socket.socket) -> None:
    # A reset, at once: the client sees ECONNRESET rather than a hang.
    conn.setsockopt(_socket.SOL_SOCKET, _socket.SO_LINGER, struct.pack("ii", 1, 0))


def read_first(conn: _socket.socket) -> tuple[str, str | None, bytes, str]:
    """(kind, name, bytes read, why no name) from what the client sends first."""
    data = b""
    deadline = time.monotonic() + FIRST_WAIT
    for _ in range(_PIECES):
        remaining = deadline - time.monotonic()
        chunk = b""
        if remaining > 0:
            conn.settimeout(remaining)
            try:
                chunk = conn.recv(_READ)
            except (TimeoutError, OSError):
                chunk = b""
        data += chunk
        if not data:
            return "tcp", None, data, "the client sent nothing"
        try:
            if data[:1] == b"\x16":
                return "tls", tlshello.server_name(data), data, "no TLS server name"
            if httphead.looks_like_http(data):
                name, _ = httphead.host(data)
                return "http", name, data, ""
            return "tcp", None, data, "neither TLS nor HTTP"
        except tlshello.Incomplete:
            if not chunk:
                return ("tls" if data[:1] == b"\x16" else "http"), None, data, "cut short"
        except tlshello.Malformed as bad:
            return ("tls" if data[:1] == b"\x16" else "http"), None, data, str(bad)
    kind = "tls" if data[:1] == b"\x16" else "http"
    return kind, None, data, f"sent in more than {_PIECES} pieces"


def tell_refused(conn: _socket.socket, entry: dict[str, object]) -> None:
    """The client learns it was refused, in its own protocol."""
    try:
        if entry["kind"] == "tls":
            conn.sendall(tlshello.access_denied())
        elif entry["kind"] == "http":
            fix = str(entry.get("fix") or "")
            why = str(entry.get("rule")) + (f"; to allow it, add to {CONFIG_FILE}: "
                                            f"{fix}" if fix else "")
            conn.sendall(httphead.forbidden(why))
        else:
            refuse_tcp(conn)
    except OSError:
        pass
