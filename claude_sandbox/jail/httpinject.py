"""The requests of a terminated connection, framed, with the real credential put back.

On a connection the egress proxy terminates (egressinject.py), what the agent sends
is HTTP/1.1 in the clear. `Requests.feed` frames it request by request (a head, then
a body by Content-Length or chunked), and in each head puts the real value back for
this session's sentinels in the credential headers only: Authorization (Bearer,
token, or Basic, decoded and encoded again), x-api-key and PRIVATE-TOKEN. A sentinel
anywhere else goes out as it came, a meaningless string. Anything that could frame
differently here and at the server (both Content-Length and Transfer-Encoding, two
lengths, a folded header, a bare CR or LF in a line, a bad chunk size) ends the
connection: the proxy must never rewrite one request while the server reads another.
So does a request whose Host (or absolute target, or a routing header) is not the
connection's server name: behind a front end that routes by Host, the real value would
reach another site; and a method other than the usual ones (TRACE echoes the request
back). The same framing, with nothing to put back, holds a plain HTTP connection judged
by its Host (egresshttp.py): a CDN routes each request by its own Host, so a second
request on a kept-alive connection would otherwise reach any site the CDN serves.

An upgrade passes the bytes on unframed, so it is taken only where it ends framing for
good: a WebSocket (h2c would carry new requests, each with its own authority) asked in
the connection's first request; the client's next bytes wait until the server's answer
(`answered`), and only a 101 lets them pass as they are. Any other answer, and the
stream is framed as before.
"""

from __future__ import annotations

import binascii

HEAD_MAX = 64 << 10
LINE_MAX = 4096  # a chunk-size or trailer line
REWRITTEN = (b"authorization", b"x-api-key", b"private-token")
# Methods a real value may go with: TRACE (a server echoing the request, credential
# headers included) and CONNECT (a tunnel to elsewhere) may not.
METHODS = frozenset({b"GET", b"HEAD", b"POST", b"PUT", b"PATCH", b"DELETE", b"OPTIONS"})
# Headers a front end may route or rewrite by: a terminated request carries none.
ROUTING = frozenset({b"x-forwarded-host", b"x-original-url", b"x-rewrite-url", b"forwarded",
                     b"x-forwarded-server", b"x-host"})
_TOKEN_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                         b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_HEX = frozenset(b"0123456789abcdefABCDEF")
# Bytes no line may hold: a server that also ends a line at a bare LF (RFC 9112 allows
# it) would read other lines, and so other requests, than the proxy does.
_LINE_BREAKERS = (b"\r", b"\n", b"\0")


class Malformed(Exception):
    """The stream cannot be framed safely; the connection ends."""


def _clean(line: bytes, what: str) -> bytes:
    if any(c in line for c in _LINE_BREAKERS):
        raise Malformed(f"a bare CR, LF or NUL in {what}")
    return line


def _replace(value: bytes, pairs: dict[bytes, bytes]) -> tuple[bytes, int]:
    count = 0
    for sentinel, real in pairs.items():
        if sentinel in value:
            count += value.count(sentinel)
            value = value.replace(sentinel, real)
    return value, count


def rewrite_value(name: bytes, value: bytes, pairs: dict[bytes, bytes]) -> tuple[bytes, int]:
    """A credential header's value with the real values in; (value, how many)."""
    scheme, space, rest = value.partition(b" ")
    if name == b"authorization" and space and scheme.lower() == b"basic":
        try:  # base64.b64decode(validate=True) is this; base64 itself imports re, enum,
            # functools and collections: about 5 ms of the egress proxy's start, every launch
            decoded = binascii.a2b_base64(rest.strip(), strict_mode=True)
        except (binascii.Error, ValueError):
            return value, 0
        replaced, count = _replace(decoded, pairs)
        encoded = binascii.b2a_base64(replaced, newline=False)
        return (scheme + b" " + encoded, count) if count else (value, 0)
    return _replace(value, pairs)


class Requests:
    """The client-to-server stream of one terminated connection to `host`."""

    def __init__(self, pairs: dict[bytes, bytes], others: tuple[bytes, ...],
                 host: bytes, port: int = 443, scheme: bytes = b"https") -> None:
        self.pairs = pairs  # this host's sentinels and their real values
        self.others = others  # every other sentinel of the session: noted, never replaced
        self.host = host.lower()  # the connection's server name: every request's Host
        self.port = str(port).encode()  # the port connected to: every request's
        self.scheme = scheme  # what a Host without a port defaults by, and an absolute target
        self.buffer = b""
        # head | body | chunk-size | chunk-data | chunk-end | trailer | await | raw
        self.state = "head"
        self.left = 0  # bytes of the body or chunk still to pass
        self.upgrade = False  # a WebSocket was asked for: `answered` decides
        self.requests = 0  # heads framed so far
        self.answer = b""  # the server's first bytes, while an upgrade awaits them
        self.injected = 0  # credential values put back, in all
        self.elsewhere = 0  # other credentials' sentinels seen in heads

    def feed(self, data: bytes) -> bytes:
        """What to send on for `data`; Malformed when it cannot be framed. The buffer is
        walked by offset and cut once: many small chunks cost what one large one does."""
        buffer = self.buffer + data if self.buffer else data
        at, out = 0, []
        while at < len(buffer):
            if self.state == "await":
                if len(buffer) - at > HEAD_MAX:
                    raise Malformed("more than 64 KiB sent before the upgrade's answer")
                break  # held until the server answers the upgrade
            if self.state == "raw":
                out.append(buffer[at:])
                at = len(buffer)
            elif self.state in ("body", "chunk-data"):
                part = buffer[at:at + self.left]
                at += len(part)
                self.left -= len(part)
                out.append(part)
                if not self.left:
                    self.state = "head" if self.state == "body" else "chunk-end"
            elif self.state == "head":
                end = buffer.find(b"\r\n\r\n", at)
                if (end if end >= 0 else len(buffer)) - at > HEAD_MAX:
                    raise Malformed("a request head larger than 64 KiB")
                if end < 0:
                    break
                out.append(self._head(buffer[at:end]))
                at = end + 4
            else:
                end = buffer.find(b"\r\n", at)
                if (end if end >= 0 else len(buffer)) - at > LINE_MAX:
                    raise Malformed("a chunk or trailer line longer than 4 KiB")
                if end < 0:
                    break
                line = buffer[at:end]
                at = end + 2
                out.append(line + b"\r\n")
                self._chunk_line(_clean(line, "a chunk or trailer line"))
        self.buffer = buffer[at:]
        return b"".join(out)

    def answered(self, data: bytes) -> bytes | None:
        """While an upgrade awaits: the server's bytes, as they come. None until its
        status line is read; then what of the client's held bytes goes on now."""
        if self.state != "await":
            return b""
        self.answer += data
        end = self.answer.find(b"\r\n")
        if end < 0 and len(self.answer) < 64:
            return None
        status = self.answer[:end if end >= 0 else 64].split(b" ")
        self.answer = b""
        switched = len(status) >= 2 and status[0] == b"HTTP/1.1" and status[1] == b"101"
        self.state = "raw" if switched else "head"
        self.upgrade = False
        return self.feed(b"")

    def _other_host(self, authority: bytes) -> bool:
        """Whether `authority` (a Host value, host[:port]) names another host or port
        than the connection's; without a port it means the scheme's own."""
        name, _, port = authority.strip().lower().rpartition(b":")
        if not name or not port.isdigit():
            name, port = authority.strip().lower(), b"443" if self.scheme == b"https" else b"80"
        return name.rstrip(b".") != self.host or port != self.port

    def _chunk_line(self, line: bytes) -> None:
        if self.state == "chunk-end":
            if line:
                raise Malformed("a chunk not ended by CRLF")
            self.state = "chunk-size"
        elif self.state == "chunk-size":
            size = line.split(b";", 1)[0].strip(b" \t")
            # Under 2 GiB: a front end that keeps a chunk's size in 32 bits would read
            # a larger one as another length, and the rest of the chunk as requests.
            if not size or len(size) > 8 or not set(size) <= _HEX or int(size, 16) >= 1 << 31:
                raise Malformed("a bad chunk size")
            self.left = int(size, 16)
            self.state = "chunk-data" if self.left else "trailer"
        elif not line:  # the trailer's end: the next request
            self.state = "head"
        else:
            name, colon, _ = line.partition(b":")
            if not colon or not name or not set(name) <= _TOKEN_CHARS:
                raise Malformed("a trailer line that is not NAME: value")

    def _head(self, head: bytes) -> bytes:
        lines = head.split(b"\r\n")
        request = _clean(lines[0], "the request line").split(b" ")
        if len(request) != 3 or request[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
            raise Malformed("not an HTTP/1.1 request line")
        if request[0] not in METHODS:
            raise Malformed(f"a method the broker does not carry a credential with "
                            f"({request[0][:16].decode(errors='replace')})")
        target = request[1]
        if not (target.startswith(b"/") or (target == b"*" and request[0] == b"OPTIONS")):
            # An absolute target names its own host: it must be the connection's.
            scheme, _, rest = target.partition(b"://")
            if scheme.lower() != self.scheme or self._other_host(rest.split(b"/", 1)[0]):
                raise Malformed("a request for another host than the connection's")
        out = [lines[0]]
        length: bytes | None = None
        chunked = False
        hosts = 0
        for line in lines[1:]:
            name, colon, value = _clean(line, "a header").partition(b":")
            if not colon or not name or not set(name) <= _TOKEN_CHARS:
                raise Malformed("a header line that is not NAME: value (or a folded one)")
            lower, value = name.lower(), value.strip(b" \t")
            if lower == b"content-length":
                if not value.isdigit() or len(value) > 15 or (length is not None
                                                              and value != length):
                    raise Malformed("a bad or repeated Content-Length")
                length = value
            elif lower == b"transfer-encoding":
                if value.lower() != b"chunked" or chunked or request[2] != b"HTTP/1.1":
                    raise Malformed("a Transfer-Encoding other than one chunked, in HTTP/1.1")
                chunked = True
            elif lower == b"upgrade":
                if value.lower() != b"websocket" or self.requests:
                    raise Malformed("an upgrade other than a WebSocket asked first")
                self.upgrade = True
            elif lower == b"host":
                # A server behind a shared front end may route by Host: a real value put
                # in for one name must never be carried to another (domain fronting).
                hosts += 1
                if hosts > 1 or self._other_host(value):
                    raise Malformed("a Host that is not the connection's server name")
            elif lower in ROUTING:
                raise Malformed(f"a routing header ({lower.decode()})")
            if lower in REWRITTEN:
                value, count = rewrite_value(lower, value, self.pairs)
                self.injected += count
            self.elsewhere += sum(value.count(s) for s in self.others)
            out.append(name + b": " + value)
        if chunked and length is not None:
            raise Malformed("both Content-Length and Transfer-Encoding")
        if not hosts:
            raise Malformed("a request without a Host")
        self.requests += 1
        if self.upgrade:
            if chunked or (length is not None and int(length)):
                raise Malformed("an upgrade with a body")
            self.state = "await"
        elif chunked:
            self.state = "chunk-size"
        elif length is not None and int(length):
            self.state, self.left = "body", int(length)
        return b"\r\n".join(out) + b"\r\n\r\n"
