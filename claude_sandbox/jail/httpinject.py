"""The requests of a terminated connection, framed, with the real credential put back.

On a connection the egress proxy terminates (egressinject.py), what the agent sends
is HTTP/1.1 in the clear. `Requests.feed` frames it request by request (a head, then
a body by Content-Length or chunked), and in each head puts the real value back for
this session's sentinels in the credential headers only: Authorization (Bearer,
token, or Basic, decoded and encoded again), x-api-key and PRIVATE-TOKEN. A sentinel
anywhere else goes out as it came, a meaningless string. Anything that could frame
differently here and at the server (both Content-Length and Transfer-Encoding, two
lengths, a folded header, a bad chunk size) ends the connection: the proxy must never
rewrite one request while the server reads another. So does a request whose Host (or
absolute target) is not the connection's server name: behind a front end that routes
by Host, the real value would reach another site. After an upgrade (a WebSocket) the
bytes are no longer HTTP and pass as they are.
"""

from __future__ import annotations

import base64
import binascii

HEAD_MAX = 64 << 10
REWRITTEN = (b"authorization", b"x-api-key", b"private-token")
_TOKEN_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                         b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


class Malformed(Exception):
    """The stream cannot be framed safely; the connection ends."""


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
        try:
            decoded = base64.b64decode(rest.strip(), validate=True)
        except (binascii.Error, ValueError):
            return value, 0
        replaced, count = _replace(decoded, pairs)
        return (scheme + b" " + base64.b64encode(replaced), count) if count else (value, 0)
    return _replace(value, pairs)


class Requests:
    """The client-to-server stream of one terminated connection."""

    def __init__(self, pairs: dict[bytes, bytes], others: tuple[bytes, ...] = (),
                 host: bytes = b"") -> None:
        self.pairs = pairs  # this host's sentinels and their real values
        self.host = host.lower()  # the connection's server name: every request's Host
        self.others = others  # every other sentinel of the session: noted, never replaced
        self.buffer = b""
        self.state = "head"  # head | body | chunk-size | chunk-data | chunk-end | trailer | raw
        self.left = 0  # bytes of the body or chunk still to pass
        self.upgrade = False
        self.injected = 0  # credential values put back, in all
        self.elsewhere = 0  # other credentials' sentinels seen in heads

    def feed(self, data: bytes) -> bytes:
        """What to send on for `data`; Malformed when it cannot be framed."""
        self.buffer += data
        out = []
        while self.buffer:
            if self.state == "raw":
                out.append(self.buffer)
                self.buffer = b""
            elif self.state in ("body", "chunk-data"):
                part, self.buffer = self.buffer[:self.left], self.buffer[self.left:]
                self.left -= len(part)
                out.append(part)
                if not self.left:
                    self.state = "head" if self.state == "body" else "chunk-end"
            elif self.state == "head":
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buffer) > HEAD_MAX:
                        raise Malformed("a request head larger than 64 KiB")
                    break
                head, self.buffer = self.buffer[:end + 4], self.buffer[end + 4:]
                out.append(self._head(head))
            else:
                line_end = self.buffer.find(b"\r\n")
                if line_end < 0:
                    if len(self.buffer) > 4096:
                        raise Malformed("a chunk line longer than 4 KiB")
                    break
                line, self.buffer = self.buffer[:line_end], self.buffer[line_end + 2:]
                out.append(line + b"\r\n")
                self._chunk_line(line)
        return b"".join(out)

    def _other_host(self, authority: bytes) -> bool:
        """Whether `authority` (a Host value, host[:port]) names another host than the
        connection's; always False when the stream was given no host."""
        if not self.host:
            return False
        name, _, port = authority.strip().lower().rpartition(b":")
        if not name or not port.isdigit():
            name, port = authority.strip().lower(), b"443"
        return name.rstrip(b".") != self.host or port != b"443"

    def _chunk_line(self, line: bytes) -> None:
        if self.state == "chunk-end":
            if line:
                raise Malformed("a chunk not ended by CRLF")
            self.state = "chunk-size"
        elif self.state == "chunk-size":
            size = line.split(b";", 1)[0].strip()
            if not size or len(size) > 16 or not all(c in b"0123456789abcdefABCDEF" for c in size):
                raise Malformed("a bad chunk size")
            self.left = int(size, 16)
            self.state = "chunk-data" if self.left else "trailer"
        elif not line:  # the trailer's end: the next request
            self.state = "head"

    def _head(self, head: bytes) -> bytes:
        lines = head[:-4].split(b"\r\n")
        request = lines[0].split(b" ")
        if len(request) != 3 or not request[2].startswith(b"HTTP/1."):
            raise Malformed("not an HTTP/1.1 request line")
        target = request[1]
        if not (target.startswith(b"/") or target == b"*"):
            # An absolute target names its own host: it must be the connection's.
            scheme, _, rest = target.partition(b"://")
            if scheme.lower() != b"https" or self._other_host(rest.split(b"/", 1)[0]):
                raise Malformed("a request for another host than the connection's")
        out = [lines[0]]
        length: bytes | None = None
        chunked = False
        hosts = 0
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or not set(name) <= _TOKEN_CHARS:
                raise Malformed("a header line that is not NAME: value (or a folded one)")
            lower, value = name.lower(), value.strip(b" \t")
            if lower == b"content-length":
                if not value.isdigit() or (length is not None and value != length):
                    raise Malformed("a bad or repeated Content-Length")
                length = value
            elif lower == b"transfer-encoding":
                if value.lower() != b"chunked" or chunked:
                    raise Malformed("a Transfer-Encoding other than one chunked")
                chunked = True
            elif lower == b"upgrade":
                self.upgrade = True
            elif lower == b"host":
                # A server behind a shared front end may route by Host: a real value put
                # in for one name must never be carried to another (domain fronting).
                hosts += 1
                if hosts > 1 or self._other_host(value):
                    raise Malformed("a Host that is not the connection's server name")
            if lower in REWRITTEN:
                value, count = rewrite_value(lower, value, self.pairs)
                self.injected += count
            self.elsewhere += sum(value.count(s) for s in self.others)
            out.append(name + b": " + value)
        if chunked and length is not None:
            raise Malformed("both Content-Length and Transfer-Encoding")
        if self.host and not hosts:
            raise Malformed("a request without a Host")
        if self.upgrade or request[0] == b"CONNECT":
            self.state = "raw"
        elif chunked:
            self.state = "chunk-size"
        elif length is not None and int(length):
            self.state, self.left = "body", int(length)
        return b"\r\n".join(out) + b"\r\n\r\n"
