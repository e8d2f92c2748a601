"""The host a plain-HTTP client asks for: the Host header of its first request head.

The egress proxy judges an HTTP connection by this name, and answers a refused
one with a 403 whose body says which rule refused it. Only the head is read,
up to a bound; the agent controls every byte, so anything that is not one
well-formed request line and one Host header is `Malformed` (a head with two
Host headers, the classic way to make two parsers disagree, is refused).
"""

from __future__ import annotations

from claude_sandbox.jail.tlshello import Incomplete, Malformed, hostname

MAX_HEAD = 32 << 10
_METHODS = frozenset((b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH",
                      b"TRACE"))


def looks_like_http(data: bytes) -> bool:
    """The first bytes could start an HTTP request: a method and a space, or a prefix."""
    return bool(data) and any((method + b" ").startswith(data[:len(method) + 1])
                              for method in _METHODS)


def host(data: bytes) -> tuple[str, int | None]:
    """(host name, port or None) of the request head at the start of `data`.

    Raises Incomplete (read more) or Malformed (refuse). CONNECT and absolute-form
    targets are refused: the proxy is transparent, a client never addresses it."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > MAX_HEAD:
            raise Malformed("a request head longer than the proxy reads")
        raise Incomplete
    head = data[:end]
    if b"\n" in head.replace(b"\r\n", b"") or b"\r" in head.replace(b"\r\n", b""):
        # A lone LF or CR: a server that accepts it would read other headers than these.
        raise Malformed("a line that does not end in CRLF")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] not in _METHODS or not parts[2].startswith(b"HTTP/1."):
        raise Malformed("not an HTTP/1 request line")
    if not parts[1].startswith(b"/"):
        raise Malformed("a request target that is not a path")
    hosts = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or b" " in name:
            raise Malformed("a header line that does not parse")
        if name.lower() == b"host":
            hosts.append(value.strip())
    if len(hosts) != 1:
        raise Malformed("not exactly one Host header")
    name, colon, port = hosts[0].rpartition(b":")
    if not colon:
        return hostname(hosts[0]), None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise Malformed("a Host port that is not a port")
    return hostname(name), int(port)


def forbidden(why: str) -> bytes:
    """The 403 a refused request gets: the body says which rule, and what would allow it."""
    body = f"claude-sandbox egress proxy: {why}\n".encode("utf-8", "replace")
    return (b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
            + body)
