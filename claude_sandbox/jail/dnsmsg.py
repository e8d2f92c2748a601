"""DNS messages as the egress proxy's resolver reads and writes them (RFC 1035).

The agent's queries reach the proxy's resolver, which answers a name that is not
allowed itself (NXDOMAIN), so the query never leaves the jail: names the agent
makes up cannot carry data out. An allowed query is forwarded, and the addresses
in the answer are noted, so a later connection to one of them is judged by the
name it was asked as. Every byte here comes from the agent or from upstream:
lengths and compression pointers are bounded, and anything else is `Malformed`.
"""

from __future__ import annotations

from claude_sandbox.core.record import record

A, AAAA = 1, 28
_MAX_POINTERS = 32
NXDOMAIN, REFUSED, FORMERR, SERVFAIL = 3, 5, 1, 2


class Malformed(ValueError):
    """Not a DNS message the resolver answers."""


@record
class Query:
    ident: int
    name: str  # lowercased, no trailing dot; labels as sent (their bytes, latin-1)
    qtype: int
    question: bytes  # the question section as sent, echoed in the answer
    recursion: bool


def _u16(data: bytes, at: int) -> int:
    if at + 2 > len(data):
        raise Malformed("truncated")
    return int.from_bytes(data[at:at + 2], "big")


def _read_name(data: bytes, at: int) -> tuple[str, int]:
    """(name, offset after it) at `at`, following at most a few compression pointers."""
    labels: list[str] = []
    end = None
    jumps = 0
    total = 0
    while True:
        if at >= len(data):
            raise Malformed("truncated name")
        length = data[at]
        if length & 0xC0 == 0xC0:
            if jumps >= _MAX_POINTERS:
                raise Malformed("a compression loop")
            pointer = _u16(data, at) & 0x3FFF
            if end is None:
                end = at + 2
            if pointer >= at:
                raise Malformed("a compression pointer forward")
            at, jumps = pointer, jumps + 1
            continue
        if length & 0xC0:
            raise Malformed("a label type DNS does not use")
        if length == 0:
            name = ".".join(labels).lower()
            return name, (at + 1 if end is None else end)
        label = data[at + 1:at + 1 + length]
        if len(label) != length:
            raise Malformed("truncated label")
        total += length + 1
        if total > 255:
            raise Malformed("a name longer than DNS allows")
        labels.append(label.decode("latin-1"))
        at += 1 + length


def parse_query(data: bytes) -> Query:
    """The one question of a standard query."""
    if len(data) < 12 or len(data) > 4096:
        raise Malformed("not a DNS query's size")
    ident, flags = _u16(data, 0), _u16(data, 2)
    if flags & 0x8000 or (flags >> 11) & 0xF != 0:
        raise Malformed("not a standard query")
    if _u16(data, 4) != 1:
        raise Malformed("not exactly one question")
    name, at = _read_name(data, 12)
    if at + 4 > len(data):
        raise Malformed("truncated question")
    qtype = _u16(data, at)
    return Query(ident, name, qtype, data[12:at + 4], bool(flags & 0x0100))


def refusal(query: Query, rcode: int = NXDOMAIN) -> bytes:
    """The answer to a name that is not allowed: the question echoed, no records."""
    flags = 0x8000 | 0x0080 | (0x0100 if query.recursion else 0) | rcode
    return (query.ident.to_bytes(2, "big") + flags.to_bytes(2, "big")
            + (1).to_bytes(2, "big") + bytes(6) + query.question)


def local_answer(query: Query, addresses: list[str]) -> bytes:
    """An answer made here, not asked upstream: NOERROR with an A record for each of
    `addresses` (IPv4 dotted quads), none for any other type (no such data)."""
    records = b""
    if query.qtype == A:
        for address in addresses:
            records += (b"\xc0\x0c" + A.to_bytes(2, "big") + (1).to_bytes(2, "big")
                        + (60).to_bytes(4, "big") + (4).to_bytes(2, "big")
                        + bytes(int(part) for part in address.split(".")))
    count = len(addresses) if query.qtype == A else 0
    flags = 0x8000 | 0x0080 | (0x0100 if query.recursion else 0)
    return (query.ident.to_bytes(2, "big") + flags.to_bytes(2, "big") + (1).to_bytes(2, "big")
            + count.to_bytes(2, "big") + bytes(4) + query.question + records)


def formerr(data: bytes) -> bytes | None:
    """FORMERR for a message that does not parse, when it has an id to answer; else None."""
    if len(data) < 2:
        return None
    return data[:2] + (0x8000 | FORMERR).to_bytes(2, "big") + bytes(8)


def answer_addresses(data: bytes) -> list[tuple[str, bytes]]:
    """(name, address bytes) of each A and AAAA record in an upstream answer."""
    if len(data) < 12:
        raise Malformed("truncated header")
    questions, answers = _u16(data, 4), _u16(data, 6)
    at = 12
    for _ in range(questions):
        _, at = _read_name(data, at)
        at += 4
    found = []
    for _ in range(answers):
        name, at = _read_name(data, at)
        rtype, length = _u16(data, at), _u16(data, at + 8)
        rdata = data[at + 10:at + 10 + length]
        if len(rdata) != length:
            raise Malformed("truncated record")
        if (rtype, length) in ((A, 4), (AAAA, 16)):
            found.append((name, rdata))
        at += 10 + length
    return found
