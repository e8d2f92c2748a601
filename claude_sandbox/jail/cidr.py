"""IP networks as integers: what the jail's route plan and its read-back need.

`ipaddress` would do, but it imports functools and collections, and the launcher
otherwise needs neither: about 4 ms of every jailed launch's start, measured
(docs/adr/0004-launch-cost.md). A network here is (version, first address as an
integer, prefix length), parsed by the C library's inet_pton, which takes only the
plain forms (no leading zeros, no netmask after the slash), and written back in the
same text `ipaddress` gives on Python 3.11 and 3.12 (tests/unit/test_cidr.py compares
the two; 3.13's writes an IPv4-mapped address with a dotted tail, which only error
messages here would show: IPv6 read back is compared by containment, not by text).
"""

from __future__ import annotations

import _socket

Network = tuple[int, int, int]  # (4 or 6, the first address, the prefix length)

_FAMILY = {4: _socket.AF_INET, 6: _socket.AF_INET6}
_BITS = {4: 32, 6: 128}


def address(text: str) -> tuple[int, int]:
    """(version, value) of an address in plain text; ValueError for anything else."""
    version = 6 if ":" in text else 4
    try:
        packed = _socket.inet_pton(_FAMILY[version], text)
    except (OSError, ValueError):  # ValueError: a NUL in the text
        raise ValueError(f"not an IP address: {text!r}") from None
    return version, int.from_bytes(packed, "big")


def network(text: str) -> Network:
    """ADDRESS or ADDRESS/PREFIX, host bits cleared (as ipaddress's strict=False)."""
    head, slash, prefix = text.partition("/")
    version, value = address(head)
    bits = _BITS[version]
    if not slash:
        length = bits
    elif prefix.isdigit() and prefix.isascii() and len(prefix) <= 3 and int(prefix) <= bits:
        length = int(prefix)
    else:
        raise ValueError(f"not a prefix length: {text!r}")
    return version, value >> (bits - length) << (bits - length), length


def address_text(version: int, value: int) -> str:
    if version == 4:
        return _socket.inet_ntop(_socket.AF_INET, value.to_bytes(4, "big"))
    # IPv6 as ipaddress writes it: lowercase hex, the first longest run of two or more
    # zero groups as "::", and never a dotted IPv4 tail (inet_ntop writes one).
    groups = [f"{value >> shift & 0xFFFF:x}" for shift in range(112, -1, -16)]
    start, run, best_start, best_run = -1, 0, -1, 1
    for index, group in enumerate(groups):
        if group != "0":
            run = 0
            continue
        if run == 0:
            start = index
        run += 1
        if run > best_run:
            best_start, best_run = start, run
    if best_start < 0:
        return ":".join(groups)
    head = ":".join(groups[:best_start])
    tail = ":".join(groups[best_start + best_run:])
    return f"{head}::{tail}"


def text(net: Network) -> str:
    """The network's canonical text: first address, a slash and the prefix length."""
    version, value, length = net
    return f"{address_text(version, value)}/{length}"


def normal(text_: str) -> str:
    """`text_` as its canonical network text (a bare address is a /32 or a /128)."""
    return text(network(text_))


def subnet_of(inner: Network, outer: Network) -> bool:
    """Whether every address of `inner` lies in `outer` (same version only)."""
    if inner[0] != outer[0] or inner[2] < outer[2]:
        return False
    shift = _BITS[outer[0]] - outer[2]
    return inner[1] >> shift == outer[1] >> shift


def broadcast(net: Network) -> str:
    """The last address of `net`."""
    version, value, length = net
    return address_text(version, value | ((1 << (_BITS[version] - length)) - 1))
