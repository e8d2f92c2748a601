"""The packet filter's two tables in the form the kernel's x_tables interface takes:
encoded here, written by the holder with IPT_SO_SET_REPLACE and read back with
IPT_SO_GET_INFO and IPT_SO_GET_ENTRIES, the socket options iptables' legacy back end
itself speaks (netfilter.py says what the rules are for and checks the read-back).

Spoken directly, they cost no process: `iptables-legacy-restore` and two saves through
`sh` cost 6-8 ms of CPU at every launch, on the cores the launcher plans on
(docs/adr/0004-launch-cost.md). Where the kernel has no x_tables (or not its nat table),
the holder's answer says why, and netfilter.py writes the same rules with the nf_tables
tools instead.

The encoding follows <linux/netfilter_ipv4/ip_tables.h> and the matches' and targets'
own headers on x86-64 and every other 64-bit Linux (a user pointer is 8 bytes, struct
xt_counters 8-aligned); a 32-bit kernel is refused by the read-back, never misread.
"""

from __future__ import annotations

import _socket
import _struct as struct  # struct.py only re-exports it: a module less to find (ADR 0004)
import os

from claude_sandbox.core.paths import DNS_FORWARDER

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

SOL_IP = 0
SO_SET_REPLACE = 64  # IPT_SO_SET_REPLACE
SO_GET_INFO = 64  # IPT_SO_GET_INFO
SO_GET_ENTRIES = 65  # IPT_SO_GET_ENTRIES
HOOKS = 5  # NF_INET_NUMHOOKS: PREROUTING, INPUT, FORWARD, OUTPUT, POSTROUTING
OUTPUT = 3
ENTRY = 112  # sizeof(struct ipt_entry): ipt_ip, nfcache, offsets, comefrom, counters
_COMEFROM = 92  # where an entry's comefrom (set by the kernel) and counters lie
INFO = 84  # sizeof(struct ipt_getinfo)
GET_ENTRIES = 40  # sizeof(struct ipt_get_entries): name, size, padding
_ACCEPT, _RETURN = -2, -5  # -NF_ACCEPT - 1, XT_RETURN
_INV_DSTIP = 0x10  # IPT_INV_DSTIP: `! -d`
_PORT_UNREACHABLE, _TCP_RESET = 3, 7  # enum ipt_reject_with
_PROTO_SPECIFIED = 2  # NF_NAT_RANGE_PROTO_SPECIFIED
_TCP, _UDP = 6, 17
_ALL = 0xFFFFFFFF  # a hook the table does not have, as GET_INFO reports it


def _align(size: int) -> int:
    return (size + 7) & ~7  # XT_ALIGN on 64-bit


def _part(size_name: tuple[str, int], data: bytes) -> bytes:
    """A match or a target: its size, name and revision, then its data, padded."""
    name, revision = size_name
    size = _align(32 + len(data))
    return struct.pack("=H29sB", size, name.encode(), revision) + data.ljust(size - 32, b"\0")


def _ip(dst: str = "", invert: bool = False, out: str = "", proto: int = 0) -> bytes:
    """struct ipt_ip: the destination (ADDRESS/PREFIX), the output device, the protocol."""
    address, mask = bytes(4), bytes(4)
    if dst:
        network, prefix = dst.split("/")
        address = _socket.inet_aton(network)
        mask = (_ALL << (32 - int(prefix)) & _ALL).to_bytes(4, "big")
    device = out.encode().ljust(16, b"\0")
    # iptables matches a name without `+` exactly: the name and its NUL under the mask.
    device_mask = (b"\xff" * (len(out) + 1) if out else b"").ljust(16, b"\0")
    return struct.pack("=4s4s4s4s16s16s16s16sHBB", bytes(4), address, bytes(4), mask,
                       bytes(16), device, bytes(16), device_mask, proto, 0,
                       _INV_DSTIP if invert else 0)


def _entry(ip: bytes, matches: Sequence[bytes], target: bytes) -> bytes:
    found = b"".join(matches)
    at = ENTRY + len(found)
    return ip + struct.pack("=IHHI16x", 0, at, at + len(target), 0) + found + target


def _verdict(verdict: int) -> bytes:
    return _part(("", 0), struct.pack("=i", verdict))


def _ports(proto: int, port: int) -> bytes:
    """-m tcp/udp --dport PORT: source ports any, destination PORT."""
    if proto == _TCP:
        return _part(("tcp", 0), struct.pack("=4H4B", 0, 0xFFFF, port, port, 0, 0, 0, 0))
    return _part(("udp", 0), struct.pack("=4HB", 0, 0xFFFF, port, port, 0))


def _mark(mark: int) -> bytes:
    """-m mark --mark MARK (struct xt_mark_mtinfo1, revision 1)."""
    return _part(("mark", 1), struct.pack("=IIB", mark, _ALL, 0))


def _reject(how: int) -> bytes:
    return _part(("REJECT", 0), struct.pack("=I", how))


def _redirect(port: int) -> bytes:
    """-j REDIRECT --to-ports PORT (struct nf_nat_ipv4_multi_range_compat)."""
    return _part(("REDIRECT", 0), struct.pack("=IIII", 1, _PROTO_SPECIFIED, 0, 0)
                 + struct.pack("!HH", port, port))


def nat_rules(mark: int, proxy_port: int, resolver_port: int) -> list[bytes]:
    """netfilter.NAT, in order."""
    return [
        _entry(_ip(), [_mark(mark)], _verdict(_RETURN)),
        _entry(_ip(proto=_UDP), [_ports(_UDP, 53)], _redirect(resolver_port)),
        _entry(_ip(proto=_TCP), [_ports(_TCP, 53)], _redirect(resolver_port)),
        _entry(_ip("127.0.0.0/8", invert=True, proto=_TCP), [], _redirect(proxy_port)),
    ]


def filter_rules(mark: int) -> list[bytes]:
    """netfilter.FILTER, in order."""
    dns = f"{DNS_FORWARDER}/32"
    return [
        _entry(_ip("127.0.0.0/8"), [], _verdict(_ACCEPT)),
        _entry(_ip(out="lo"), [], _verdict(_ACCEPT)),
        _entry(_ip(dns, proto=_UDP), [_mark(mark), _ports(_UDP, 53)], _verdict(_ACCEPT)),
        _entry(_ip(dns, proto=_TCP), [_mark(mark), _ports(_TCP, 53)], _verdict(_ACCEPT)),
        _entry(_ip(dns), [], _reject(_PORT_UNREACHABLE)),
        _entry(_ip(proto=_TCP), [_mark(mark)], _verdict(_ACCEPT)),
        _entry(_ip(proto=_TCP), [], _reject(_TCP_RESET)),
        _entry(_ip(), [], _reject(_PORT_UNREACHABLE)),
    ]


def table(hooks: Sequence[int], output: Sequence[bytes]) -> tuple[bytes, bytes]:
    """A table with these built-in chains, each with the policy ACCEPT, and `output`'s
    rules in OUTPUT: (what GET_INFO reports for it, past the name; its entries). The
    chains in hook order, each chain's policy after its rules, the table's end last,
    as iptables lays them out."""
    entries = b""
    first, policy = [_ALL] * HOOKS, [_ALL] * HOOKS
    count = 0
    for hook in sorted(hooks):
        first[hook] = len(entries)
        for rule in (output if hook == OUTPUT else ()):
            entries += rule
            count += 1
        policy[hook] = len(entries)
        entries += _entry(_ip(), [], _verdict(_ACCEPT))
        count += 1
    entries += _entry(_ip(), [], _part(("ERROR", 0), b"ERROR".ljust(32, b"\0")))
    valid = sum(1 << hook for hook in hooks)
    info = struct.pack(f"=I{HOOKS}I{HOOKS}III", valid, *first, *policy, count + 1, len(entries))
    return info, entries


def replace(name: str, info: bytes, entries: bytes, old_count: int, counters: int) -> bytes:
    """IPT_SO_SET_REPLACE's argument: `info` (table()) and `entries` for the table
    `name`, which holds `old_count` entries now; `counters`: the address of a buffer of
    old_count struct xt_counters, where the kernel puts the old table's."""
    valid, *rest = struct.unpack(f"=I{HOOKS}I{HOOKS}III", info)
    first, policy, count, size = rest[:HOOKS], rest[HOOKS:2 * HOOKS], rest[-2], rest[-1]
    # A hook the table does not have is 0 here (the kernel reports it as all ones).
    first = [0 if at == _ALL else at for at in first]
    policy = [0 if at == _ALL else at for at in policy]
    return struct.pack(f"=32sIII{HOOKS}I{HOOKS}IIQ", name.encode(), valid, count, size,
                       *first, *policy, old_count, counters) + entries


def old_count(info: bytes) -> int:
    """The number of entries a GET_INFO answer (past the name) reports."""
    return int(struct.unpack_from("=I", info, 4 + 8 * HOOKS)[0])


def differences(info: bytes, entries: bytes, got_info: bytes, got_entries: bytes) -> str:
    """Where the kernel's table differs from the one written; "" where it does not.
    Each entry's counters and the hooks the kernel marks as reaching it (comefrom) are
    the kernel's own; everything else must come back as written."""
    if got_info != info:
        return "its chains or its size"
    if len(got_entries) != len(entries):
        return "its size"
    at = 0
    while at < len(entries):
        following = struct.unpack_from("=H", entries, at + 90)[0]
        if following < ENTRY or at + following > len(entries):
            return "its entries' layout"
        skip = slice(at + _COMEFROM, at + ENTRY)
        ours, theirs = bytearray(entries[at:at + following]), bytearray(
            got_entries[at:at + following])
        ours[skip.start - at:skip.stop - at] = theirs[skip.start - at:skip.stop - at] = bytes(20)
        if ours != theirs:
            return f"the entry at {at}"
        at += following
    return ""


def write(tables: Sequence[tuple[str, bytes, bytes]]) -> list[str]:
    """In the jail's namespace (the holder, its root): replace each table (name, info,
    entries), then read each back. ["ok", then for each table what GET_INFO and
    GET_ENTRIES report, in hex]; ["err", why] where the kernel refuses a table (no
    x_tables, no nat table: the nf_tables tools may write them instead); ["unread",
    why] where the tables are written and cannot be read back, which refuses the
    launch: what the kernel holds then is not known, and a second back end would not
    make it so."""
    from claude_sandbox.core.libc import (
        addressof,
        byref,
        c_uint32,
        get_errno,
        load_libc,
        string_buffer,
    )

    libc = load_libc()
    try:
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_RAW | _socket.SOCK_CLOEXEC,
                              _socket.IPPROTO_RAW)
    except OSError as exc:
        return ["err", f"no raw socket for x_tables ({exc.strerror or exc})"]

    def ask(option: int, request: bytes, size: int) -> bytes:
        """getsockopt with an argument in the buffer (the table's name), as libc's:
        Python's own getsockopt cannot send one."""
        buffer = string_buffer(request, size)
        length = c_uint32(size)
        if libc.getsockopt(sock.fileno(), SOL_IP, option, buffer, byref(length)) != 0:
            errno = get_errno()
            raise OSError(errno, os.strerror(errno))
        return buffer.raw[:length.value]

    def put(name: str, info: bytes, entries: bytes) -> None:
        count = old_count(ask(SO_GET_INFO, name.encode().ljust(32, b"\0"), INFO)[32:])
        counters = string_buffer(b"", 16 * max(count, 1))
        sock.setsockopt(SOL_IP, SO_SET_REPLACE,
                        replace(name, info, entries, count, addressof(counters)))

    got = ["ok"]
    try:
        for index, (name, info, entries) in enumerate(tables):
            try:
                put(name, info, entries)
            except OSError as exc:
                why = f"the {name} table: {exc.strerror or exc}"
                # The tables written before it are emptied again (their chains, ACCEPT),
                # so that the nf_tables tools' tables are the only rules; where that
                # fails, what x_tables hold is not known, and the launch is refused.
                for written, written_info, _ in tables[:index]:
                    valid = int(struct.unpack_from("=I", written_info)[0])
                    try:
                        put(written, *table([h for h in range(HOOKS) if valid >> h & 1], []))
                    except OSError as again:
                        return ["unread", f"{why}; the {written} table not emptied: {again}"]
                return ["err", why]
        for name, _, _ in tables:
            key = name.encode().ljust(32, b"\0")
            try:
                back = ask(SO_GET_INFO, key, INFO)[32:]
                size = int(struct.unpack_from("=I", back, len(back) - 4)[0])
                table_back = ask(SO_GET_ENTRIES, key + struct.pack("=I4x", size),
                                 GET_ENTRIES + size)[GET_ENTRIES:]
            except (OSError, struct.error) as exc:  # type: ignore[attr-defined]  # the stubs name it in struct only
                return ["unread", f"the {name} table: {exc}"]
            got += [back.hex(), table_back.hex()]
    finally:
        sock.close()
    return got
