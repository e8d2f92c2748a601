"""The egress jail's route plan: pure functions, no I/O (docs/explanation/egress-jail.md).

pasta copies the outer container's routes into the jail's namespace, so the
holder throws the main table away and builds an allow-list from nothing:
private, CGNAT, connected and link-local destinations go nowhere, the
internet goes through pasta's gateway. This module turns the network facts
the launcher read (addresses, gateway) into the routes to add, each with the `ip`
command that would add it (for `explain` and the warnings), and predicts exactly what
the kernel must then show; readback.py compares a read-back with
that prediction. Anything in the read-back the plan did not predict (a stray
route, an extra attribute, a policy rule, a global IPv6 route) refuses the
launch: containment is proved by reading, not assumed from writing.

The functions here take facts and return data, so the whole policy is tested
without a namespace (tests/unit/test_routes.py).
"""

from __future__ import annotations

from claude_sandbox.core.paths import DNS_FORWARDER
from claude_sandbox.core.record import record
from claude_sandbox.jail import cidr
from claude_sandbox.jail.blocked import BLOCKED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


# Policy rules a fresh network namespace has, and nothing else: an extra rule
# could send traffic to a table we never read or programmed.
EXPECTED_RULES_V4: tuple[tuple[int, str], ...] = ((0, "local"), (32766, "main"), (32767, "default"))
EXPECTED_RULES_V6: tuple[tuple[int, str], ...] = ((0, "local"), (32766, "main"))


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
    """One line of the plan: the route to add (`expect`, what the kernel must then hold),
    and the `ip` command that would add it, as `explain` shows it."""

    command: str
    expect: Route
    required: bool  # False: a failure warns (loses reach, not containment)
    why: str


@record
class Plan:
    """The whole main-table programme plus the kernel's own local table."""

    routes: tuple[PlannedRoute, ...]
    local: tuple[Route, ...]  # what the kernel keeps in table local


@record
class Readback:
    routes_v4: tuple[Route, ...]
    rules_v4: tuple[Rule, ...]
    routes_v6: tuple[Route, ...]
    rules_v6: tuple[Rule, ...]


def _drop(facts: NetFacts, kind: str, dst: str, why: str) -> PlannedRoute:
    return PlannedRoute(
        f"route add {kind} {dst} src {facts.address}",
        Route("main", kind, dst, prefsrc=facts.address),
        True,
        why,
    )


def _via_gateway(facts: NetFacts, dst: str, required: bool, why: str,
                 named: str | None = None) -> PlannedRoute:
    """`named`: how the command spells `dst` ("default")."""
    return PlannedRoute(
        f"route add {named or dst} via {facts.gateway} dev {facts.iface} src {facts.address} "
        "onlink",
        Route("main", "unicast", dst, gateway=facts.gateway, dev=facts.iface,
              prefsrc=facts.address, flags=("onlink",)),
        required,
        why,
    )


def _blocked_rows(facts: NetFacts) -> list[PlannedRoute]:
    rows = [_drop(facts, b.kind, cidr.normal(b.cidr), b.why) for b in BLOCKED if b.routed]
    fixed = {cidr.normal(b.cidr) for b in BLOCKED} | {"0.0.0.0/0"}
    # Connected subnets and whatever pasta copied from outside: the outer
    # container's neighbours (a database, the host bridge) live there.
    local_nets = [cidr.normal(f"{a.address}/{a.prefixlen}")
                  for a in facts.addresses if not a.loopback]
    for net in dict.fromkeys([*local_nets, *(cidr.normal(c) for c in facts.copied)]):
        if net not in fixed:
            rows.append(_drop(facts, "blackhole", net,
                              "connected or copied subnet of the outer container"))
    return rows


def _host_rows(facts: NetFacts, host: Iterable[str], skip: set[str]) -> list[PlannedRoute]:
    """A blackhole for the gateway and for every local route of the host.

    pasta makes a connection to any of them from the host: to the gateway's own
    services, or to whatever listens on the host's other addresses (a TEST-NET or
    public address the class rows do not cover, or a whole range the host answers
    for: an AnyIP `local` route). `host` holds addresses and CIDR ranges.
    """
    blocked = [cidr.network(b.cidr) for b in BLOCKED]
    whys = {f"{facts.gateway}/32": "the gateway: its own services, through pasta"}
    for entry in host:
        net = cidr.normal(entry if "/" in entry else f"{entry}/32")
        whys.setdefault(net, "a local address or range of the host: its services, through "
                        "pasta")
    rows = []
    for net, why in whys.items():
        network = cidr.network(net)
        if network[0] != 4:
            raise ValueError(f"not an IPv4 address or range: {net}")
        if network[2] == 32 and cidr.address_text(4, network[1]) in skip:
            continue  # allow-ip names it
        if any(cidr.subnet_of(network, b) for b in blocked):
            continue
        rows.append(_drop(facts, "blackhole", net, why))
    return rows


def build_plan(facts: NetFacts, dns: str, allow_ip: Sequence[str],
               host: Sequence[str] = ()) -> Plan:
    """The route programme for `facts`, in the order it must be applied.

    `host` holds every local address and range of the host and its gateways (read where
    the launcher runs).
    The gateway is the default route's nexthop but not a destination: the
    nexthop is `onlink` (the kernel then needs no route to it), and a
    blackhole /32 stops connections to it. Optional rows come last so a
    failure among them cannot stop a required row from being programmed.
    """
    rows = _blocked_rows(facts) + _host_rows(facts, host, set(allow_ip))
    rows.append(_via_gateway(facts, "0.0.0.0/0", True, "the internet, through pasta", "default"))
    rows.append(_via_gateway(facts, f"{dns}/32", False, "pasta's DNS forwarder"))
    rows += [_via_gateway(facts, f"{addr}/32", False, "allow-ip exception")
             for addr in dict.fromkeys(allow_ip) if addr != dns]
    return Plan(tuple(rows), expected_local_table(facts.addresses))


def host_addresses(fib_trie: str, route: str) -> tuple[str, ...]:
    """Pure: every local route of the host (from /proc/net/fib_trie: its addresses, and any
    range it answers for, `ip route add local 198.51.100.0/24 dev lo`), as CIDRs, and each
    gateway (/proc/net/route) as an address."""
    found: list[str] = []
    last = ""
    table = ""
    for line in fib_trie.splitlines():
        text = line.strip()
        if line[:1] not in (" ", "") and text.endswith(":"):
            table = text[:-1]  # "Main", "Local", or another table's id
        elif text.startswith("|--"):
            last = text[3:].strip()
        elif text.startswith("/") and last and table in ("Main", "Local") \
                and "LOCAL" in text.split():
            # The host's own addresses and ranges are the local table's (shown under Main
            # too, where the kernel merged the two). A local route in a policy table ("Id
            # 100": a transparent proxy's `local 0.0.0.0/0 ... table 100`) is steering,
            # not an address; and no range as wide as /0 names the host.
            prefix = text[1:].split()[0]
            if not prefix.isdigit() or not 0 < int(prefix) <= 32:
                continue
            entry = last if prefix == "32" else cidr.normal(f"{last}/{prefix}")
            if entry not in found:
                found.append(entry)
    for line in route.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[2] != "00000000":
            try:
                packed = bytes.fromhex(fields[2])
            except ValueError:
                continue
            if len(packed) != 4:
                continue
            gateway = cidr.address_text(4, int.from_bytes(packed, "little"))  # the kernel's
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
        net = cidr.network(f"{a.address}/{a.prefixlen}")
        kept = [("local", f"{a.address}/32", "host")]
        if a.loopback and a.prefixlen < 32:
            kept.append(("local", cidr.text(net), "host"))
        if a.prefixlen < 31:
            kept.append(("broadcast", f"{cidr.broadcast(net)}/32", "link"))
        out += [Route("local", kind, dst, dev=a.dev, prefsrc=a.address, scope=scope,
                      protocol="kernel") for kind, dst, scope in kept]
    return tuple(out)


def explain_plan(allow_ip: Sequence[str] = ()) -> list[str]:
    """The plan as `claude-sandbox explain` prints it, for example addresses."""
    return plan_lines(example_plan(allow_ip))


def example_plan(allow_ip: Sequence[str] = (), host: Sequence[str] = ()) -> Plan:
    """The plan for pasta's usual addresses (192.0.2.2 behind 192.0.2.1): `explain`'s;
    `host`: the host's own addresses and ranges, as the launch reads them."""
    example = NetFacts(
        iface="eth0",
        address="192.0.2.2",
        gateway="192.0.2.1",
        addresses=(Address("lo", "127.0.0.1", 8, True), Address("eth0", "192.0.2.2", 24, False)),
        copied=(),
    )
    return build_plan(example, DNS_FORWARDER, allow_ip, host)


def plan_lines(plan: Plan) -> list[str]:
    lines = ["ip route flush table main    # drop every route pasta copied from outside"]
    for row in plan.routes:
        mark = "" if row.required else "  [warns on failure]"
        lines.append(f"ip {row.command:<62}# {row.why}{mark}")
    lines.append("IPv6 switched off (net.ipv6.conf.all.disable_ipv6=1), or only link-local left")
    lines.append("then every table and policy rule is read back and must equal this plan")
    return lines
