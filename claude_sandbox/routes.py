"""The egress jail's route plan: pure functions, no I/O (docs/explanation/egress-jail.md).

pasta copies the outer container's routes into the jail's namespace, so the
holder throws the main table away and builds an allow-list from nothing:
private, CGNAT, connected and link-local destinations go nowhere, the
internet goes through pasta's gateway. This module turns the network facts
the holder read (addresses, gateway) into one `ip -batch` script, predicts
exactly what the kernel must then show, and compares a read-back with that
prediction. Anything in the read-back the plan did not predict (a stray
route, an extra attribute, a policy rule, a global IPv6 route) refuses the
launch: containment is proved by reading, not assumed from writing.

The functions here take facts and return data, so the whole policy is tested
without a namespace (tests/unit/test_routes.py).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Sequence

from .errors import EXIT_JAIL, SandboxError
from .paths import DNS_FORWARDER
from .record import record


@record
class Blocked:
    """One destination the agent must never reach, and why."""

    cidr: str
    kind: str  # "blackhole" (silent drop) or "unreachable" (fast ICMP-style error)
    why: str


# The block list, one row per threat. Order is the order programmed; the
# kernel's longest-prefix match, not this order, decides precedence.
BLOCKED: tuple[Blocked, ...] = (
    Blocked("10.0.0.0/8", "blackhole", "RFC 1918 private network"),
    Blocked("172.16.0.0/12", "blackhole", "RFC 1918 private network"),
    Blocked("192.168.0.0/16", "blackhole", "RFC 1918 private network"),
    Blocked("100.64.0.0/10", "blackhole", "RFC 6598 carrier-grade NAT (cloud VPCs, tailnets)"),
    Blocked("169.254.0.0/16", "unreachable", "link-local, instance metadata services"),
    Blocked("168.63.129.16/32", "blackhole", "Azure WireServer"),
    Blocked("100.100.100.200/32", "blackhole", "Alibaba Cloud metadata service"),
)

# Policy rules a fresh network namespace has, and nothing else: an extra rule
# could send traffic to a table we never read or programmed.
EXPECTED_RULES_V4: tuple[tuple[int, str], ...] = ((0, "local"), (32766, "main"), (32767, "default"))
EXPECTED_RULES_V6: tuple[tuple[int, str], ...] = ((0, "local"), (32766, "main"))

# IPv6 is switched off in the jail; where that fails, only these may remain.
_V6_HARMLESS = (
    ipaddress.IPv6Network("fe80::/10"),  # link-local: reaches only pasta's tap
    ipaddress.IPv6Network("ff00::/8"),  # multicast, link scope in practice
    ipaddress.IPv6Network("::1/128"),  # the namespace's own loopback
)


@record
class Address:
    """One IPv4 address the namespace holds."""

    dev: str
    address: str
    prefixlen: int
    loopback: bool


@record
class NetFacts:
    """What pasta configured in the namespace, as the holder read it."""

    iface: str  # pasta's tap interface
    address: str  # the interface's IPv4 address: every route leaves from it
    gateway: str
    addresses: tuple[Address, ...]  # every IPv4 address, loopback included
    copied: tuple[str, ...]  # main-table destinations pasta copied (not default)


@record
class Route:
    """A route as the kernel reports it, normalised for comparison.

    `extra` holds every attribute we do not model, so an unexpected one
    (a nexthop object, an encap, an expiry) shows up as a difference.
    """

    table: str
    type: str
    dst: str
    gateway: str | None = None
    dev: str | None = None
    prefsrc: str | None = None
    scope: str = "global"
    protocol: str = "boot"
    metric: int = 0
    flags: tuple[str, ...] = ()
    extra: tuple[tuple[str, str], ...] = ()


@record
class Rule:
    """A policy rule, normalised: priority, table and every other attribute."""

    priority: int
    table: str
    extra: tuple[tuple[str, str], ...] = ()


@record
class PlannedRoute:
    """One line of the plan: the `ip -batch` command and what it must produce."""

    command: str
    expect: Route
    required: bool  # False: a failure warns (loses reach, not containment)
    why: str


@record
class Plan:
    """The whole main-table programme plus the kernel's own local table."""

    routes: tuple[PlannedRoute, ...]
    local: tuple[Route, ...]  # what the kernel keeps in table local

    def batch(self) -> str:
        """The `ip -batch` script: flush, then every row, required rows first."""
        lines = ["route flush table main", *(r.command for r in self.routes)]
        return "\n".join(lines) + "\n"


@record
class Readback:
    routes_v4: tuple[Route, ...]
    rules_v4: tuple[Rule, ...]
    routes_v6: tuple[Route, ...]
    rules_v6: tuple[Rule, ...]


def _network(cidr: str) -> str:
    return str(ipaddress.ip_network(cidr, strict=False))


def _host(addr: str) -> str:
    return f"{addr}/32"


def _blocked_rows(facts: NetFacts) -> list[PlannedRoute]:
    src = facts.address
    rows = [
        PlannedRoute(
            f"route add {b.kind} {b.cidr} src {src}",
            Route("main", b.kind, _network(b.cidr), prefsrc=src),
            True,
            b.why,
        )
        for b in BLOCKED
    ]
    fixed = {_network(b.cidr) for b in BLOCKED}
    # Connected subnets and whatever pasta copied from outside: the outer
    # container's neighbours (a database, the host bridge) live there.
    local_nets = [_network(f"{a.address}/{a.prefixlen}") for a in facts.addresses if not a.loopback]
    for net in dict.fromkeys([*local_nets, *(_network(c) for c in facts.copied)]):
        if net in fixed or net == "0.0.0.0/0":
            continue
        fixed.add(net)
        rows.append(
            PlannedRoute(
                f"route add blackhole {net} src {src}",
                Route("main", "blackhole", net, prefsrc=src),
                True,
                "connected or copied subnet of the outer container",
            )
        )
    return rows


def _via_gateway(facts: NetFacts, addr: str, required: bool, why: str) -> PlannedRoute:
    return PlannedRoute(
        f"route add {_host(addr)} via {facts.gateway} dev {facts.iface} src {facts.address} "
        "onlink",
        Route(
            "main",
            "unicast",
            _host(addr),
            gateway=facts.gateway,
            dev=facts.iface,
            prefsrc=facts.address,
            flags=("onlink",),
        ),
        required,
        why,
    )


def _covered(addr: str, blocked: Iterable[str]) -> bool:
    ip = ipaddress.ip_address(addr)
    return any(ip in ipaddress.ip_network(net) for net in blocked)


def _host_rows(facts: NetFacts, host: Iterable[str], skip: set[str]) -> list[PlannedRoute]:
    """A blackhole /32 for the gateway and for every address of the host.

    pasta makes a connection to any of them from the host: to the gateway's own
    services, or to whatever listens on the host's other interfaces (a TEST-NET
    or public address the private-range rows do not cover).
    """
    blocked = [_network(b.cidr) for b in BLOCKED] + ["127.0.0.0/8"]
    rows: list[PlannedRoute] = []
    seen: set[str] = set()
    for addr, why in [(facts.gateway, "the gateway: its own services, through pasta"),
                      *((a, "an address of the host: its services, through pasta")
                        for a in host)]:
        if addr in seen or addr in skip or _covered(addr, blocked):
            continue
        seen.add(addr)
        rows.append(PlannedRoute(
            f"route add blackhole {_host(addr)} src {facts.address}",
            Route("main", "blackhole", _host(addr), prefsrc=facts.address),
            True,
            why,
        ))
    return rows


def build_plan(facts: NetFacts, dns: str, allow_ip: Sequence[str],
               host: Sequence[str] = ()) -> Plan:
    """The route programme for `facts`, in the order it must be applied.

    `host` holds every IPv4 address of the host (read where the launcher runs).
    The gateway is the default route's nexthop but not a destination: the
    nexthop is `onlink` (the kernel then needs no route to it), and a
    blackhole /32 stops connections to it. Optional rows come last so a
    failure among them cannot stop a required row from being programmed.
    """
    src = facts.address
    rows = _blocked_rows(facts)
    rows += _host_rows(facts, host, set(allow_ip))
    rows.append(
        PlannedRoute(
            f"route add default via {facts.gateway} dev {facts.iface} src {src} onlink",
            Route(
                "main", "unicast", "0.0.0.0/0", gateway=facts.gateway, dev=facts.iface,
                prefsrc=src, flags=("onlink",),
            ),
            True,
            "the internet, through pasta",
        )
    )
    rows.append(_via_gateway(facts, dns, False, "pasta's DNS forwarder"))
    seen = {dns}
    for addr in allow_ip:
        if addr in seen:
            continue
        seen.add(addr)
        rows.append(_via_gateway(facts, addr, False, "allow-ip exception"))
    return Plan(tuple(rows), expected_local_table(facts.addresses))


def host_addresses(fib_trie: str, route: str) -> tuple[str, ...]:
    """Pure: every local IPv4 address (from /proc/net/fib_trie) and gateway (/proc/net/route)."""
    found: list[str] = []
    last = ""
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith("|--"):
            last = text[3:].strip()
        elif text.endswith("/32 host LOCAL") and last and last not in found:
            found.append(last)
    for line in route.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[2] != "00000000":
            try:
                gateway = str(ipaddress.IPv4Address(bytes.fromhex(fields[2])[::-1]))
            except ValueError:
                continue
            if gateway not in found:
                found.append(gateway)
    return tuple(a for a in found if not a.startswith("127."))


def expected_local_table(addresses: Iterable[Address]) -> tuple[Route, ...]:
    """What the kernel itself puts in table local for these addresses.

    A local route per address; the whole prefix for a loopback address; the
    subnet's broadcast address when the prefix leaves room for one. (Kernels
    since 5.x no longer add the network-address broadcast route.)
    """
    out: list[Route] = []
    for a in addresses:
        net = ipaddress.ip_network(f"{a.address}/{a.prefixlen}", strict=False)

        def local(dst: str, scope: str, kind: str = "local", a: Address = a) -> Route:
            return Route(
                "local", kind, dst, dev=a.dev, prefsrc=a.address, scope=scope, protocol="kernel"
            )

        out.append(local(_host(a.address), "host"))
        if a.loopback and a.prefixlen < 32:
            out.append(local(str(net), "host"))
        if a.prefixlen < 31:
            out.append(local(_host(str(net.broadcast_address)), "link", "broadcast"))
    return tuple(out)


def explain_plan(
    facts: NetFacts | None = None, dns: str = DNS_FORWARDER, allow_ip: Sequence[str] = ()
) -> list[str]:
    """The plan as `claude-sandbox explain` prints it, for example addresses."""
    if facts is None:
        facts = NetFacts(
            iface="eth0",
            address="192.0.2.2",
            gateway="192.0.2.1",
            addresses=(
                Address("lo", "127.0.0.1", 8, True),
                Address("eth0", "192.0.2.2", 24, False),
            ),
            copied=(),
        )
    return plan_lines(build_plan(facts, dns, allow_ip))


def plan_lines(plan: Plan) -> list[str]:
    lines = ["ip route flush table main    # drop every route pasta copied from outside"]
    for row in plan.routes:
        mark = "" if row.required else "  [warns on failure]"
        lines.append(f"ip {row.command:<62}# {row.why}{mark}")
    lines.append("IPv6 switched off (net.ipv6.conf.all.disable_ipv6=1), or only link-local left")
    lines.append("then every table and policy rule is read back and must equal this plan")
    return lines


# --- read-back -------------------------------------------------------------


def _fail(what: str) -> SandboxError:
    return SandboxError(f"egress jail: unexpected route read-back ({what})", EXIT_JAIL)


def parse_json_stream(text: str) -> list[object]:
    """The JSON documents `ip -j -batch` prints one after another."""
    decoder = json.JSONDecoder()
    docs: list[object] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return docs
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            raise _fail("output is not JSON") from exc
        docs.append(doc)


def _str(obj: dict[str, object], key: str, default: str | None) -> str | None:
    value = obj.get(key, default)
    if value is None or isinstance(value, str):
        return value
    raise _fail(f"{key} is not a string")


def _normalise_dst(dst: str, family: int) -> str:
    if dst == "default":
        return "0.0.0.0/0" if family == 4 else "::/0"
    try:
        net = ipaddress.ip_network(dst, strict=False)
    except ValueError as exc:
        raise _fail(f"bad destination {dst!r}") from exc
    if net.version != family:
        raise _fail(f"IPv{net.version} destination {dst!r} in the IPv{family} table")
    return str(net)


_ROUTE_KEYS = frozenset(
    {"table", "type", "dst", "gateway", "dev", "prefsrc", "scope", "protocol", "metric", "flags"}
)


def parse_route(obj: object, family: int = 4) -> Route:
    """One element of `ip -j -4|-6 route show table all`, normalised.

    The family comes from the command, never from the text: "default" or a
    blackhole says nothing about which family it belongs to.
    """
    if not isinstance(obj, dict):
        raise _fail("route is not an object")
    dst = _str(obj, "dst", None)
    if dst is None:
        raise _fail("route without destination")
    flags = obj.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise _fail("flags are not a list of strings")
    metric = obj.get("metric", 0)
    if not isinstance(metric, int) or isinstance(metric, bool):
        raise _fail("metric is not an integer")
    extra = tuple(
        sorted(
            (str(k), json.dumps(v, sort_keys=True)) for k, v in obj.items() if k not in _ROUTE_KEYS
        )
    )
    return Route(
        table=_str(obj, "table", "main") or "main",
        type=_str(obj, "type", "unicast") or "unicast",
        dst=_normalise_dst(dst, family),
        gateway=_str(obj, "gateway", None),
        dev=_str(obj, "dev", None),
        prefsrc=_str(obj, "prefsrc", None),
        scope=_str(obj, "scope", "global") or "global",
        protocol=_str(obj, "protocol", "boot") or "boot",
        metric=metric,
        flags=tuple(sorted(flags)),
        extra=extra,
    )


def parse_rule(obj: object) -> Rule:
    if not isinstance(obj, dict):
        raise _fail("rule is not an object")
    priority = obj.get("priority")
    table = obj.get("table")
    if not isinstance(priority, int) or isinstance(priority, bool) or not isinstance(table, str):
        raise _fail("rule without priority or table")
    # "src": "all" is the only selector a fresh namespace's rules carry.
    extra = tuple(
        sorted(
            (str(k), json.dumps(v, sort_keys=True))
            for k, v in obj.items()
            if k not in ("priority", "table") and not (k == "src" and v == "all")
        )
    )
    return Rule(priority, table, extra)


def _list(doc: object, what: str) -> list[object]:
    if not isinstance(doc, list):
        raise _fail(f"{what} is not a list")
    return doc


def _family_docs(text: str, family: int) -> tuple[tuple[Route, ...], tuple[Rule, ...]]:
    docs = parse_json_stream(text)
    if len(docs) != 2:
        raise _fail(f"IPv{family}: wrong number of documents")
    return (
        tuple(parse_route(r, family) for r in _list(docs[0], "routes")),
        tuple(parse_rule(r) for r in _list(docs[1], "rules")),
    )


def parse_readback(v4: str, v6: str) -> Readback:
    """Parse `ip -j -4` and `ip -j -6` output of (route show table all, rule show)."""
    routes_v4, rules_v4 = _family_docs(v4, 4)
    routes_v6, rules_v6 = _family_docs(v6, 6)
    return Readback(routes_v4, rules_v4, routes_v6, rules_v6)


def _v6_harmless(route: Route) -> bool:
    net = ipaddress.IPv6Network(route.dst)
    return route.gateway is None and any(net.subnet_of(h) for h in _V6_HARMLESS)


def compare(plan: Plan, failed: Iterable[int], readback: Readback) -> list[str]:
    """Every difference between the plan and the read-back; empty means locked.

    `failed` holds indexes (into plan.routes) of optional rows `ip` rejected;
    they must then be absent, not half-present.
    """
    skip = set(failed)
    want = [r.expect for i, r in enumerate(plan.routes) if i not in skip] + list(plan.local)
    problems: list[str] = []
    have_v4 = list(readback.routes_v4)
    for r in readback.routes_v6:
        if not _v6_harmless(r):
            problems.append(f"IPv6 route {r.dst} ({r.type}, table {r.table})")
    for r in sorted(set(have_v4) - set(want), key=repr):
        problems.append(f"unplanned route {r.type} {r.dst} table {r.table}: {r}")
    for r in sorted(set(want) - set(have_v4), key=repr):
        problems.append(f"missing route {r.type} {r.dst} table {r.table}")
    if len(have_v4) != len(set(have_v4)):
        problems.append("duplicate routes")
    for got, expected, family in (
        (readback.rules_v4, EXPECTED_RULES_V4, "IPv4"),
        (readback.rules_v6, EXPECTED_RULES_V6, "IPv6"),
    ):
        if tuple((r.priority, r.table) for r in got) != expected or any(r.extra for r in got):
            problems.append(f"{family} policy rules differ from a fresh namespace's: {got}")
    return problems


def failed_lines(stderr: str) -> set[int]:
    """Batch line numbers `ip -force -batch -` reported as failed (1-based)."""
    out: set[int] = set()
    for line in stderr.splitlines():
        if line.startswith("Command failed -:"):
            tail = line.removeprefix("Command failed -:").strip()
            if tail.isdigit():
                out.add(int(tail))
    return out


def parse_facts(addr_doc: object, route_doc: object) -> NetFacts:
    """NetFacts from `ip -j -4 addr show` and `ip -j -4 route show table main`."""
    addresses: list[Address] = []
    for link in _list(addr_doc, "addresses"):
        if not isinstance(link, dict):
            raise _fail("link is not an object")
        dev = link.get("ifname")
        flags = link.get("flags", [])
        if not isinstance(dev, str) or not isinstance(flags, list):
            raise _fail("link without name")
        for info in link.get("addr_info", []) or []:
            if not isinstance(info, dict) or info.get("family") != "inet":
                continue
            local, plen = info.get("local"), info.get("prefixlen")
            if not isinstance(local, str) or not isinstance(plen, int):
                raise _fail("address without prefix")
            addresses.append(Address(dev, local, plen, "LOOPBACK" in flags))
    gateway = iface = None
    copied: list[str] = []
    for r in (parse_route(o, 4) for o in _list(route_doc, "routes")):
        if r.dst == "0.0.0.0/0" and r.gateway and r.dev:
            gateway, iface = r.gateway, r.dev
        else:
            copied.append(r.dst)
    if gateway is None or iface is None:
        raise SandboxError("egress jail: pasta configured no IPv4 default route", EXIT_JAIL)
    own = [a for a in addresses if a.dev == iface]
    if not own:
        raise SandboxError(f"egress jail: pasta's interface {iface} has no IPv4 address", EXIT_JAIL)
    return NetFacts(iface, own[0].address, gateway, tuple(addresses), tuple(copied))


# --- the DNS forwarder answers DNS only ---------------------------------------
# pasta hands every connection to the forwarder's address to the host's resolver,
# on any port: without a filter the resolver host's other services are one
# connect() away. The jail's own filter table lets port 53 through and rejects
# the rest; it is written with iptables-restore and read back with iptables-save.


def dns_filter(dns: str) -> tuple[str, ...]:
    """The filter table's rules, as iptables-save prints them."""
    return (
        f"-A OUTPUT -d {dns}/32 -p udp -m udp --dport 53 -j ACCEPT",
        f"-A OUTPUT -d {dns}/32 -p tcp -m tcp --dport 53 -j ACCEPT",
        f"-A OUTPUT -d {dns}/32 -j REJECT --reject-with icmp-port-unreachable",
    )


def dns_filter_restore(dns: str) -> str:
    """iptables-restore input: the whole filter table, replaced."""
    chains = [":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    return "\n".join(["*filter", *chains, *dns_filter(dns), "COMMIT", ""])


def filter_differs(dns: str, saved: str) -> str | None:
    """Why an iptables-save of the filter table is not exactly the plan, or None."""
    rules = [line for line in saved.splitlines() if line.startswith("-")]
    policies = [line.split()[:2] for line in saved.splitlines() if line.startswith(":")]
    if sorted(policies) != [[":FORWARD", "ACCEPT"], [":INPUT", "ACCEPT"], [":OUTPUT", "ACCEPT"]]:
        return f"filter chains {policies}"
    if tuple(rules) != dns_filter(dns):
        return f"filter rules {rules}"
    return None
