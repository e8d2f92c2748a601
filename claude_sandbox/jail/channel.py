"""The launcher's end of its channels to the jail holder and the egress proxy.

Messages are core/wire.py's. What goes wrong on the way is said as the jail's: a message
the codec refuses (nothing of it was sent) refuses the launch in one line; a peer that
closed its end, or answered past the limit or cut short, is a holder gone, which the
launch reads with the holder's own status (session.py).
"""

from __future__ import annotations

from claude_sandbox.core import wire
from claude_sandbox.core.errors import jail_error
from claude_sandbox.jail import reaping

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket

# What the holder and the proxy answer: a status and its words, a tool's output at most.
REPLY_LIMIT = 1 << 24


def send(sock: _socket.socket, fields: list[str], fds: list[int] | None = None) -> None:
    try:
        wire.send(sock, fields, fds or ())
    except wire.WireError as exc:
        raise jail_error(f"the jail cannot be given this session: {exc}") from None
    except OSError:
        raise reaping.HolderGone from None


def answer(sock: _socket.socket) -> list[str] | None:
    """The next answer's fields; None when the peer closed its end before one (for the
    session's exec, that is its success: the close-on-exec socket closed)."""
    try:
        return wire.receive_fields(sock, REPLY_LIMIT)
    except (OSError, wire.WireError):
        raise reaping.HolderGone from None
