"""The jail's links, addresses, routes and policy rules as rtnetlink carries them, turned
into the records of routes.py, and a planned route turned into the request that adds it.

The read-back is the proof that the jail is locked (check 19), so the decoder models
what the plan programs and nothing more: every other header field that is not zero and
every attribute it does not model is kept, by name, in a record's `extra`, where it is a
difference from the plan (readback.compare). The names are those `ip -json` prints.

Pure functions: tests/unit/test_routemsg.py runs them on bytes.
"""

from __future__ import annotations

import _socket
import sys

from claude_sandbox.core.errors import SandboxError, jail_error
from claude_sandbox.jail import cidr
from claude_sandbox.jail.netlink import attribute, attributes, u32, uint
from claude_sandbox.jail.routes import Address, Route, Rule

AF_INET = _socket.AF_INET
AF_INET6 = _socket.AF_INET6
_VERSION = {AF_INET: 4, AF_INET6: 6}
_SIZE = {AF_INET: 4, AF_INET6: 16}
_IFF_LOOPBACK = 0x8
IFLA_IFNAME = 3
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC, RTA_TABLE = 1, 4, 5, 6, 7, 15
FRA_PRIORITY, FRA_SUPPRESS_IFGROUP, FRA_SUPPRESS_PREFIXLEN, FRA_TABLE, FRA_PROTOCOL = (
    6, 13, 14, 15, 21)
_FR_ACT_TO_TBL = 1
_UNSET = 0xFFFFFFFF  # a rule's "no suppression", as the kernel reports it
_RTPROT_KERNEL = 2

TABLES = {0: "unspec", 253: "default", 254: "main", 255: "local"}
TYPES = {0: "none", 1: "unicast", 2: "local", 3: "broadcast", 4: "anycast", 5: "multicast",
         6: "blackhole", 7: "unreachable", 8: "prohibit", 9: "throw", 10: "nat",
         11: "xresolve"}
PROTOCOLS = {0: "unspec", 1: "redirect", 2: "kernel", 3: "boot", 4: "static"}
SCOPES = {0: "global", 200: "site", 253: "link", 254: "host", 255: "nowhere"}
FLAGS = {0x1: "dead", 0x2: "pervasive", 0x4: "onlink", 0x8: "offload", 0x10: "linkdown",
         0x20: "unresolved", 0x40: "trap", 0x100: "notify", 0x4000: "rt_offload",
         0x8000: "rt_trap", 0x20000000: "rt_offload_failed"}
# A route's attributes that are modelled elsewhere or named in `extra`; any other is
# kept by its number.
_ROUTE_ATTRIBUTES = {2: "src", 3: "iif", 8: "metrics", 9: "multipath", 11: "flow",
                     12: "cacheinfo", 16: "mark", 18: "via", 19: "newdst", 20: "pref",
                     21: "encap_type", 22: "encap", 23: "expires", 25: "uid",
                     26: "ttl_propagate", 30: "nhid"}
# What leads a route somewhere other than its own destination: no IPv6 route may carry one.
NEXTHOPS = frozenset({"multipath", "via", "encap", "nhid"})

# The dump requests: a header of the family, zero elsewhere.
LINK_DUMP = bytes(16)  # struct ifinfomsg, AF_UNSPEC: every link
ADDRESS_DUMP_V4 = bytes([AF_INET]) + bytes(7)  # struct ifaddrmsg


def dump_request(family: int) -> bytes:
    """A dump of every route, or every rule, of `family`: struct rtmsg and struct
    fib_rule_hdr are both 12 bytes, the family first."""
    return bytes([family]) + bytes(11)


def _fail(what: str) -> SandboxError:
    return jail_error(f"unexpected route read-back ({what})")


def _name(names: dict[int, str], value: int) -> str:
    return names.get(value, str(value))


def _address(family: int, data: bytes) -> str:
    if len(data) != _SIZE[family]:
        raise _fail(f"an address of {len(data)} bytes")
    return cidr.address_text(_VERSION[family], int.from_bytes(data, "big"))


def _header(body: bytes, size: int, what: str) -> bytes:
    if len(body) < size:
        raise _fail(f"{what} cut short")
    return body[:size]


def links(dump: list[bytes]) -> dict[int, tuple[str, bool]]:
    """Each link's index: its name, and whether it is a loopback."""
    found: dict[int, tuple[str, bool]] = {}
    for body in dump:
        head = _header(body, 16, "a link")
        index = int.from_bytes(head[4:8], sys.byteorder, signed=True)
        name = next((v for k, v in attributes(body[16:]) if k == IFLA_IFNAME), None)
        if name is None or not name.endswith(b"\0"):
            raise _fail(f"link {index} without a name")
        found[index] = (name[:-1].decode(errors="replace"),
                        bool(uint(head[8:12]) & _IFF_LOOPBACK))
    return found


def addresses(dump: list[bytes], names: dict[int, tuple[str, bool]]) -> tuple[Address, ...]:
    """Every IPv4 address of an AF_INET address dump, with its link's name."""
    found: list[Address] = []
    for body in dump:
        head = _header(body, 8, "an address")
        if head[0] != AF_INET:
            continue
        link = names.get(uint(head[4:8]))
        if link is None:
            raise _fail(f"an address on link {uint(head[4:8])}, which the link dump lacks")
        given = dict(attributes(body[8:]))
        local = given.get(IFA_LOCAL, given.get(IFA_ADDRESS))
        if local is None:
            raise _fail("an address without its value")
        found.append(Address(link[0], _address(AF_INET, local), head[1], link[1]))
    return tuple(found)


def family_of(body: bytes) -> int:
    return _header(body, 12, "a route")[0]


def route(body: bytes, names: dict[int, tuple[str, bool]]) -> Route:
    """One route of a dump: struct rtmsg and its attributes."""
    head = _header(body, 12, "a route")
    family, dst_len, src_len, tos, table, protocol, scope, kind = head[:8]
    if family not in _VERSION or dst_len > 8 * _SIZE[family]:
        raise _fail(f"a route of family {family}, prefix length {dst_len}")
    extra: list[tuple[str, str]] = []
    if src_len or tos:
        extra.append(("source", f"{src_len}/{tos}"))
    dst, gateway, dev, prefsrc, metric = bytes(_SIZE[family]), None, None, None, 0
    found = attributes(body[12:])
    _once(found, (RTA_DST, RTA_TABLE, RTA_GATEWAY, RTA_OIF, RTA_PREFSRC, RTA_PRIORITY))
    for key, value in found:
        if key == RTA_DST:
            dst = value
            _address(family, value)
        elif key == RTA_TABLE:
            table = uint(value)
        elif key == RTA_GATEWAY:
            gateway = _address(family, value)
        elif key == RTA_OIF:
            index = uint(value)
            dev = names[index][0] if index in names else f"if{index}"
        elif key == RTA_PREFSRC:
            prefsrc = _address(family, value)
        elif key == RTA_PRIORITY:
            metric = uint(value)
        else:
            extra.append((_ROUTE_ATTRIBUTES.get(key, f"attribute {key}"), value.hex()))
    flags = uint(head[8:12])
    named = tuple(sorted(name for bit, name in FLAGS.items() if flags & bit))
    unnamed = flags & ~sum(FLAGS)
    return Route(
        table=_name(TABLES, table),
        type=_name(TYPES, kind),
        dst=cidr.text((_VERSION[family], int.from_bytes(dst, "big"), dst_len)),
        gateway=gateway,
        dev=dev,
        prefsrc=prefsrc,
        scope=_name(SCOPES, scope),
        protocol=_name(PROTOCOLS, protocol),
        metric=metric,
        flags=(*named, f"{unnamed:#x}") if unnamed else named,
        extra=tuple(sorted(extra)),
    )


def rule(body: bytes) -> Rule:
    """One policy rule of a dump: struct fib_rule_hdr and its attributes. A fresh
    namespace's rules select every source and look a table up; anything else is extra."""
    head = _header(body, 12, "a rule")
    extra: list[tuple[str, str]] = []
    if any(head[1:4]) or any(head[5:7]) or head[7] != _FR_ACT_TO_TBL or uint(head[8:12]):
        extra.append(("header", head.hex()))
    table, priority = head[4], 0
    found = attributes(body[12:])
    _once(found, (FRA_PRIORITY, FRA_TABLE))
    for key, value in found:
        if key == FRA_PRIORITY:
            priority = uint(value)
        elif key == FRA_TABLE:
            table = uint(value)
        elif key in (FRA_SUPPRESS_PREFIXLEN, FRA_SUPPRESS_IFGROUP) and uint(value) == _UNSET:
            continue  # the defaults: nothing suppressed
        elif key == FRA_PROTOCOL and uint(value) in (0, _RTPROT_KERNEL):
            continue  # made by the kernel (or before rules had a maker)
        else:
            extra.append((f"attribute {key}", value.hex()))
    return Rule(priority, _name(TABLES, table), tuple(sorted(extra)))


def _once(found: list[tuple[int, bytes]], modelled: tuple[int, ...]) -> None:
    """Refuse a message that carries a modelled attribute twice: which one the kernel
    meant would be a guess."""
    kinds = [key for key, _ in found if key in modelled]
    if len(kinds) != len(set(kinds)):
        raise _fail("an attribute given twice")


def _number(names: dict[int, str], name: str) -> int:
    if name.isdigit() and name.isascii() and int(name) < 256:
        return int(name)  # as the read-back names a number it has no name for
    for number, known in names.items():
        if known == name:
            return number
    raise ValueError(f"no number for {name!r}")


def add_request(planned: Route, names: dict[int, tuple[str, bool]]) -> bytes:
    """The RTM_NEWROUTE body that adds `planned` (an IPv4 route of the plan)."""
    version, value, length = cidr.network(planned.dst)
    if version != 4 or planned.extra:
        raise ValueError(f"not a route the plan makes: {planned}")
    flags = 0
    for flag in planned.flags:
        flags |= _number(FLAGS, flag)
    head = bytes([AF_INET, length, 0, 0, _number(TABLES, planned.table),
                  _number(PROTOCOLS, planned.protocol), _number(SCOPES, planned.scope),
                  _number(TYPES, planned.type)]) + u32(flags)
    tail = attribute(RTA_DST, value.to_bytes(4, "big")) if length else b""
    for key, address in ((RTA_PREFSRC, planned.prefsrc), (RTA_GATEWAY, planned.gateway)):
        if address is not None:
            tail += attribute(key, cidr.address(address)[1].to_bytes(4, "big"))
    if planned.dev is not None:
        index = next((i for i, (name, _) in names.items() if name == planned.dev), None)
        if index is None:
            raise jail_error(f"the jail's namespace has no link {planned.dev}")
        tail += attribute(RTA_OIF, u32(index))
    if planned.metric:
        tail += attribute(RTA_PRIORITY, u32(planned.metric))
    return head + tail
