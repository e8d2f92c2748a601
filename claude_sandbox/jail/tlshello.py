"""The name a TLS client asks for: the server_name extension of its ClientHello (RFC 8446, 6066).

The egress proxy judges a TLS connection by this name before any byte reaches a
server. The parser reads only what it needs, from bytes the agent controls, so
every length is checked against what is there: a truncated, oversized or
malformed hello is a `Malformed`, never an exception of another kind, never a
read past the end. `Incomplete` says more bytes are needed (the hello may span
TLS records and TCP segments); the proxy gives up after a bound.

The alert the proxy answers a refused hello with is built here too: a fatal
`access_denied` (49), which clients report as such instead of hanging.
"""

from __future__ import annotations

MAX_HELLO = 64 << 10  # ClientHellos with post-quantum key shares are a few KiB; cap far above
_HANDSHAKE = 22
_CLIENT_HELLO = 1
_SERVER_NAME = 0
_HOST_NAME = 0
# encrypted_client_hello (RFC 9849) and the draft ESNI before it: the name this hello
# shows is only the outer one, any the agent picks, while a front end that decrypts
# the inner hello routes by the name inside. Refused by class, whatever the outer name.
_ENCRYPTED = frozenset({0xFE0D, 0xFFCE})


class Malformed(ValueError):
    """Not a ClientHello the proxy can judge: refused."""


class Incomplete(Exception):
    """A prefix of a ClientHello: read more."""


def _u16(data: bytes, at: int) -> int:
    if at + 2 > len(data):
        raise Malformed("truncated")
    return int.from_bytes(data[at:at + 2], "big")


def _handshake(data: bytes) -> bytes:
    """The handshake message carried by the TLS records at the start of `data`."""
    message = b""
    at = 0
    need: int | None = None
    while need is None or len(message) < need:
        if len(data) < at + 5:
            raise Incomplete
        if data[at] != _HANDSHAKE:
            raise Malformed("not a TLS handshake record")
        if data[at + 1] != 3:
            raise Malformed("not a TLS record version")
        length = _u16(data, at + 3)
        if length == 0 or length > 1 << 14:
            raise Malformed("a record length TLS does not allow")
        if len(data) < at + 5 + length:
            raise Incomplete
        message += data[at + 5:at + 5 + length]
        at += 5 + length
        if need is None and len(message) >= 4:
            if message[0] != _CLIENT_HELLO:
                raise Malformed("not a ClientHello")
            need = 4 + int.from_bytes(message[1:4], "big")
            if need > MAX_HELLO:
                raise Malformed("a ClientHello longer than the proxy reads")
    return message[4:need]


def server_name(data: bytes) -> str | None:
    """The host_name of the ClientHello at the start of `data`, or None when it sends none.

    Raises Incomplete (read more) or Malformed (refuse)."""
    if len(data) > MAX_HELLO + 5 * 8:
        raise Malformed("a ClientHello longer than the proxy reads")
    hello = _handshake(data)
    at = 2 + 32  # legacy_version, random
    if at >= len(hello):
        raise Malformed("truncated")
    at += 1 + hello[at]  # legacy_session_id
    at += 2 + _u16(hello, at)  # cipher_suites
    if at >= len(hello):
        raise Malformed("truncated")
    at += 1 + hello[at]  # legacy_compression_methods
    if at == len(hello):
        return None  # no extensions at all
    end = at + 2 + _u16(hello, at)
    if end != len(hello):
        raise Malformed("the extensions do not fill the hello")
    at += 2
    found: str | None = None
    seen: set[int] = set()
    while at < end:
        kind, length = _u16(hello, at), _u16(hello, at + 2)
        body = hello[at + 4:at + 4 + length]
        if len(body) != length:
            raise Malformed("truncated extension")
        if kind in seen:
            raise Malformed("an extension sent twice")  # RFC 8446 4.2: never
        seen.add(kind)
        if kind in _ENCRYPTED:
            raise Malformed("an encrypted ClientHello (ECH): the server would read "
                            "another name than the one judged")
        if kind == _SERVER_NAME:
            found = _host_name(body)
        at += 4 + length
    return found


def _host_name(body: bytes) -> str:
    """The one host_name of a server_name extension, as ASCII letters, digits, '-' and '.'."""
    end = 2 + _u16(body, 0)
    if end != len(body):
        raise Malformed("a server_name list that does not fill its extension")
    at = 2
    names = []
    while at < end:
        if at + 3 > end:
            raise Malformed("truncated server_name")
        kind, length = body[at], _u16(body, at + 1)
        name = body[at + 3:at + 3 + length]
        if len(name) != length:
            raise Malformed("truncated server_name")
        if kind == _HOST_NAME:
            names.append(name)
        at += 3 + length
    if len(names) != 1:
        raise Malformed("not exactly one host_name")  # RFC 6066 3: one of each type
    return hostname(names[0])


_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-.")


def hostname(raw: bytes) -> str:
    """A DNS host name, lowercased, without a trailing dot; Malformed for anything else
    (an address, an empty label, a byte outside letters, digits and hyphens)."""
    name = raw.lower().rstrip(b".")
    if not name or len(name) > 253 or not set(name) <= _NAME_BYTES:
        raise Malformed("not a host name")
    labels = name.split(b".")
    if any(not label or len(label) > 63 or label.startswith(b"-") or label.endswith(b"-")
           for label in labels):
        raise Malformed("not a host name")
    if labels[-1].isdigit():
        raise Malformed("an address, not a name")
    return name.decode("ascii")


def access_denied() -> bytes:
    """A TLS fatal alert record, access_denied: the client says why it was refused."""
    return bytes((21, 3, 3, 0, 2, 2, 49))
