"""One codec for every message between our processes: text fields, each ended by NUL.

The crossings (docs/dev/contracts.md, "Messages between our processes"):
- the launcher and the jail holder, and the launcher and the egress proxy's control
  socket (jail/holder.py, jail/session.py);
- the launcher's inner record to the inner stage, in a memfd (inside/spec.py, read by
  `_enter` or by inside/enter.c);
- the launcher and its /proc helper (`plan`), then the inner stage and the helper
  (`mask`), on one socketpair (launch/session/procmask.py, inside/prochide.py,
  inside/enter.c);
- the command client and the command server (inside/command-client.c, inside/broker.py);
- the launcher and its janitor (launch/session/janitor.py).

A message is a list of text fields; its first field names its kind, and each reader
checks the kinds and fields it takes. On the wire each field is its bytes (UTF-8 with
surrogateescape: argv, environment and paths are bytes on Linux) followed by NUL. NUL
cannot occur in argv, the environment or a path, so nothing is escaped: a field that
holds one is refused when it is packed. On a stream a message is framed by its length,
4 bytes big endian, and descriptors or the sender's credentials ride on the frame's
first byte. Every reader names a limit and refuses a message past it before reading or
allocating its body; a body that does not end in NUL is refused. tests/unit/test_wire.py
fuzzes the codec once for all of them.

Imports are `os` and `sys`, and `_socket` where a socket is used: the jail holder and
`_enter` (under harsh and brokered) start on the launch's critical path (`socket` would
cost its enums, and the inner record needs no socket at all).
"""

from __future__ import annotations

import os
import sys

from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket

ENCODING = "utf-8"
ERRORS = "surrogateescape"
HEAD = 4  # a stream frame's length: 4 bytes, big endian
MAX_FDS = 64  # descriptors one message may carry (the kernel's own limit is 253)
_INT = 4  # sizeof(int): one descriptor, one field of struct ucred


class WireError(ValueError):
    """A message the codec refuses: over its limit, unterminated, or a field with NUL."""


@record
class Message:
    fields: tuple[str, ...]
    fds: tuple[int, ...] = ()  # received close-on-exec; the reader owns them
    pid: int = 0  # the sender's pid from SCM_CREDENTIALS, 0 when none came


def pack(fields: list[str] | tuple[str, ...]) -> bytes:
    """The fields, each ended by NUL."""
    encoded = [field.encode(ENCODING, ERRORS) for field in fields]
    for number, data in enumerate(encoded):
        if b"\0" in data:
            raise WireError(f"field {number} holds a NUL byte")
    return b"".join(data + b"\0" for data in encoded)


def unpack(data: bytes, limit: int) -> list[str]:
    """The fields of `data`, which must be at most `limit` bytes and end in NUL (or be
    empty: no fields)."""
    if len(data) > limit:
        raise WireError(f"a message of {len(data)} bytes, over its limit of {limit}")
    if not data:
        return []
    if not data.endswith(b"\0"):
        raise WireError("a message whose last field is not ended by NUL")
    return [field.decode(ENCODING, ERRORS) for field in data[:-1].split(b"\0")]


def frame(fields: list[str] | tuple[str, ...]) -> bytes:
    """The message as a stream carries it: its length, then its fields."""
    body = pack(fields)
    return len(body).to_bytes(HEAD, "big") + body


def messages(data: bytes, limit: int) -> list[list[str]]:
    """Every framed message in `data`, a pipe read to its end. A last message cut short
    is left out: its writer died while writing it."""
    found, at = [], 0
    while len(data) - at >= HEAD:
        size = int.from_bytes(data[at:at + HEAD], "big")
        if size > limit or len(data) - at - HEAD < size:
            break
        found.append(unpack(data[at + HEAD:at + HEAD + size], limit))
        at += HEAD + size
    return found


def send(sock: _socket.socket, fields: list[str] | tuple[str, ...],
         fds: list[int] | tuple[int, ...] = (), *, credentials: bool = False) -> None:
    """One framed message; `fds` (SCM_RIGHTS) and, with `credentials`, this process's
    pid, uid and gid (SCM_CREDENTIALS, checked by the kernel) ride on its first byte."""
    import _socket

    data = frame(fields)
    ancillary = []
    if fds:
        if len(fds) > MAX_FDS:
            raise WireError(f"{len(fds)} descriptors, over the limit of {MAX_FDS}")
        ancillary.append((_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                          b"".join(fd.to_bytes(_INT, sys.byteorder) for fd in fds)))
    if credentials:
        ids = (os.getpid(), os.getuid(), os.getgid())
        ancillary.append((_socket.SOL_SOCKET, _socket.SCM_CREDENTIALS,
                          b"".join(i.to_bytes(_INT, sys.byteorder) for i in ids)))
    sent = sock.sendmsg([data[:1]], ancillary) if ancillary else 0
    sock.sendall(data[sent:])


def receive(sock: _socket.socket, limit: int) -> Message | None:
    """The next framed message, or None when the peer closed the socket before one
    began. Descriptors that came with it are the caller's (close-on-exec); a sender's
    credentials are read where the socket has SO_PASSCRED. Past `limit`, or cut short,
    the descriptors are closed and WireError raised."""
    import _socket

    head = b""
    fds: list[int] = []
    pid = 0
    space = _socket.CMSG_SPACE(_INT * MAX_FDS) + _socket.CMSG_SPACE(3 * _INT)
    try:
        while len(head) < HEAD:
            data, ancillary, _, _ = sock.recvmsg(HEAD - len(head), space,
                                                 _socket.MSG_CMSG_CLOEXEC)
            for level, kind, blob in ancillary:
                if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                    usable = len(blob) - len(blob) % _INT
                    fds += [int.from_bytes(blob[i:i + _INT], sys.byteorder)
                            for i in range(0, usable, _INT)]
                elif level == _socket.SOL_SOCKET and kind == _socket.SCM_CREDENTIALS \
                        and len(blob) >= 3 * _INT:
                    pid = int.from_bytes(blob[:_INT], sys.byteorder, signed=True)
            if not data:
                if head:
                    raise WireError("the peer closed the socket inside a frame's length")
                close(fds)
                return None
            head += data
        size = int.from_bytes(head, "big")
        if size > limit:
            raise WireError(f"a message of {size} bytes, over its limit of {limit}")
        body = _exactly(sock, size)
        return Message(tuple(unpack(body, limit)), tuple(fds), pid)
    except BaseException:
        close(fds)
        raise


def receive_fields(sock: _socket.socket, limit: int) -> list[str] | None:
    """The next message's fields, for a reader that takes no descriptors (any that came
    are closed); None when the peer closed the socket before one began."""
    message = receive(sock, limit)
    if message is None:
        return None
    close(message.fds)
    return list(message.fields)


def _exactly(sock: _socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise WireError("the peer closed the socket inside a message")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def close(fds: list[int] | tuple[int, ...]) -> None:
    """Close descriptors a message brought, whichever are still open."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
