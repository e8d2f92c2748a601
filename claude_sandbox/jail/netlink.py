"""rtnetlink's framing, and one conversation with the kernel over a routing socket.

The launcher locks the jail's routes through a NETLINK_ROUTE socket made in the jail's
network namespace (start.make_tap): three `ip` runs cost a launch 5-7 ms of CPU and
about 6 ms on its serial path (docs/adr/0004-launch-cost.md). This module frames requests and splits
answers; routemsg.py gives them meaning. It trusts nothing it reads: a message that is
cut short, an attribute that overruns its message, an answer to another request, or a
dump the kernel says was interrupted is an error, never a partial result.

Pure functions but for `Netlink`, which owns the socket.
"""

from __future__ import annotations

import _socket
import os
import sys

from claude_sandbox.core.errors import SandboxError, jail_error

# <linux/netlink.h> and <linux/rtnetlink.h>: the values are the kernel's ABI.
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWADDR, RTM_GETADDR = 20, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWRULE, RTM_GETRULE = 32, 34
_HEAD = 16  # struct nlmsghdr: length, type, flags, sequence, port
_BUFFER = 1 << 16  # a dump's datagram fits (the kernel sizes them to the reader's page)
TIMEOUT = 5.0  # the kernel answers at once; this only bounds a wedged namespace
_ORDER = sys.byteorder  # netlink's integers are the host's, but for addresses

# One message as read: its type, its flags, and its body after the header.
Message = tuple[int, int, bytes]
# One attribute: its type (flags masked off) and its payload.
Attribute = tuple[int, bytes]


def _fail(what: str) -> SandboxError:
    return jail_error(f"unexpected answer from the kernel's routing socket ({what})")


def u32(value: int) -> bytes:
    return value.to_bytes(4, _ORDER)


def uint(data: bytes) -> int:
    """An attribute's unsigned integer, of the width its payload has."""
    if len(data) not in (1, 2, 4, 8):
        raise _fail(f"an integer of {len(data)} bytes")
    return int.from_bytes(data, _ORDER)


def attribute(kind: int, payload: bytes) -> bytes:
    """One struct rtattr, padded to four bytes."""
    size = 4 + len(payload)
    return (size.to_bytes(2, _ORDER) + kind.to_bytes(2, _ORDER) + payload
            + b"\0" * (-size % 4))


def attributes(data: bytes) -> list[Attribute]:
    """The attributes of a message's tail, in order; any that overruns the tail refuses.
    Types keep their flag bits (NLA_F_NESTED, NLA_F_NET_BYTEORDER): the kernel sets none
    on these messages' own attributes, and a flagged one is then no modelled one."""
    found: list[Attribute] = []
    at = 0
    while at < len(data):
        if len(data) - at < 4:
            raise _fail("an attribute cut short")
        size = int.from_bytes(data[at:at + 2], _ORDER)
        kind = int.from_bytes(data[at + 2:at + 4], _ORDER)
        if size < 4 or at + size > len(data):
            raise _fail(f"attribute {kind} of {size} bytes in {len(data) - at}")
        found.append((kind, data[at + 4:at + size]))
        at += size + (-size % 4)
    return found


def frame(kind: int, flags: int, sequence: int, body: bytes) -> bytes:
    """One request: the header and `body`."""
    return ((_HEAD + len(body)).to_bytes(4, _ORDER) + kind.to_bytes(2, _ORDER)
            + flags.to_bytes(2, _ORDER) + u32(sequence) + u32(0) + body)


def split(data: bytes, sequence: int) -> list[Message]:
    """The messages of one datagram, each checked to answer request `sequence`."""
    found: list[Message] = []
    at = 0
    while at < len(data):
        if len(data) - at < _HEAD:
            raise _fail("a header cut short")
        size = int.from_bytes(data[at:at + 4], _ORDER)
        if size < _HEAD or at + size > len(data):
            raise _fail(f"a message of {size} bytes in {len(data) - at}")
        kind = int.from_bytes(data[at + 4:at + 6], _ORDER)
        flags = int.from_bytes(data[at + 6:at + 8], _ORDER)
        if int.from_bytes(data[at + 8:at + 12], _ORDER) != sequence:
            raise _fail("an answer to another request")
        found.append((kind, flags, data[at + _HEAD:at + size]))
        at += size + (-size % 4)
    return found


def error_of(body: bytes) -> int:
    """An NLMSG_ERROR's errno: 0 for an acknowledgement."""
    if len(body) < 4:
        raise _fail("an error message cut short")
    return -int.from_bytes(body[:4], _ORDER, signed=True)


class Netlink:
    """A NETLINK_ROUTE socket of the jail's namespace: requests, each answered in full
    before the next is sent."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(TIMEOUT)
        self.sequence = 0

    def _send(self, kind: int, flags: int, body: bytes) -> int:
        self.sequence += 1
        self.sock.send(frame(kind, flags | NLM_F_REQUEST, self.sequence, body))
        return self.sequence

    def _receive(self, sequence: int) -> list[Message]:
        try:
            data, _, flags, sender = self.sock.recvmsg(_BUFFER)
        except OSError as exc:  # a timeout, or ENOBUFS: the answer is not whole
            raise _fail(f"reading it: {exc.strerror or exc}") from None
        if flags & _socket.MSG_TRUNC:  # a datagram longer than the buffer: cut, not whole
            raise _fail("an answer longer than its buffer")
        if sender[0] != 0:  # port 0 is the kernel; any other is a process
            raise _fail(f"an answer from port {sender[0]}, not the kernel")
        if not data:
            raise _fail("no answer")
        return split(data, sequence)

    def dump(self, kind: int, body: bytes) -> list[bytes]:
        """Every message a dump request answers with, whole: an interrupted dump (the
        table changed while it was read) refuses rather than give a torn picture."""
        sequence = self._send(kind, NLM_F_DUMP, body)
        found: list[bytes] = []
        while True:
            for got, flags, payload in self._receive(sequence):
                if flags & NLM_F_DUMP_INTR:
                    raise _fail("the dump was interrupted by a change")
                if got == NLMSG_DONE:
                    if len(payload) >= 4 and error_of(payload):
                        raise _fail(f"the dump failed: {os.strerror(error_of(payload))}")
                    return found
                if got == NLMSG_ERROR:
                    code = error_of(payload)
                    raise _fail(f"the dump failed: {os.strerror(code)}")
                if got != kind - 2:  # RTM_GETX is answered by RTM_NEWX
                    raise _fail(f"message type {got} in a dump of {kind}")
                found.append(payload)

    def change(self, kind: int, flags: int, body: bytes) -> int:
        """Send one change and return the kernel's errno for it (0: done)."""
        sequence = self._send(kind, flags | NLM_F_ACK, body)
        answer = self._receive(sequence)
        if len(answer) != 1 or answer[0][0] != NLMSG_ERROR:
            raise _fail(f"no acknowledgement for message type {kind}")
        return error_of(answer[0][2])
