"""The egress jail's route plan and read-back comparison, without a namespace."""

from __future__ import annotations

import pytest

from claude_sandbox.core.errors import EXIT_JAIL, SandboxError
from claude_sandbox.jail import readback, routes

FACTS = routes.NetFacts(
    iface="eth0",
    address="192.0.2.2",
    gateway="192.0.2.1",
    addresses=(
        routes.Address("lo", "127.0.0.1", 8, True),
        routes.Address("eth0", "192.0.2.2", 24, False),
    ),
    copied=("192.0.2.0/24", "10.88.0.0/16"),
)


RULES_V4 = (routes.Rule(0, "local"), routes.Rule(32766, "main"), routes.Rule(32767, "default"))
RULES_V6 = (routes.Rule(0, "local"), routes.Rule(32766, "main"))


def _readback(
    plan: routes.Plan,
    extra: list[routes.Route] | None = None,
    v6: list[routes.Route] | None = None,
    rules: tuple[routes.Rule, ...] = RULES_V4,
) -> routes.Readback:
    shown = [r.expect for r in plan.routes] + list(plan.local) + (extra or [])
    return routes.Readback(tuple(shown), rules, tuple(v6 or ()), RULES_V6)


def test_plan_blocks_every_private_range_and_keeps_the_internet() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ("10.1.2.3",))
    cmds = [r.command for r in plan.routes]
    for cidr in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"):
        assert f"route add blackhole {cidr} src 192.0.2.2" in cmds
    assert "route add unreachable 169.254.0.0/16 src 192.0.2.2" in cmds
    assert "route add blackhole 168.63.129.16/32 src 192.0.2.2" in cmds
    assert "route add blackhole 100.100.100.200/32 src 192.0.2.2" in cmds
    # The connected subnet (a class of its own here) and the copied outer route go
    # nowhere too, once each.
    assert "route add unreachable 192.0.2.0/24 src 192.0.2.2" in cmds
    assert not any(c.startswith("route add blackhole 192.0.2.0/24") for c in cmds)
    assert "route add blackhole 10.88.0.0/16 src 192.0.2.2" in cmds
    # Every route leaves from the interface's own address.
    assert all(c.removesuffix(" onlink").endswith("src 192.0.2.2") for c in cmds)


@pytest.mark.parametrize("cidr", [
    "0.0.0.0/8", "192.0.0.0/24", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
    "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24", "192.175.48.0/24"])
def test_every_special_purpose_class_goes_nowhere(cidr: str) -> None:
    cmds = [r.command for r in routes.build_plan(FACTS, routes.DNS_FORWARDER, ()).routes]
    assert f"route add unreachable {cidr} src 192.0.2.2" in cmds


def test_the_two_documentation_blocks_of_test_networks_stay_reachable() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ())
    for dst in ("198.51.100.0/24", "203.0.113.0/24"):
        assert not any(dst in r.command for r in plan.routes)
    assert not any("127.0.0.0/8" in r.command for r in plan.routes)  # the local table's


PUBLIC = routes.NetFacts(
    iface="eth0", address="203.0.113.5", gateway="203.0.113.1",
    addresses=(routes.Address("lo", "127.0.0.1", 8, True),
               routes.Address("eth0", "203.0.113.5", 24, False)),
    copied=())


def test_the_gateway_is_a_nexthop_not_a_destination_and_optional_rows_come_last() -> None:
    public = [r.command for r in routes.build_plan(PUBLIC, routes.DNS_FORWARDER, ()).routes]
    assert "route add blackhole 203.0.113.1/32 src 203.0.113.5" in public
    assert "route add blackhole 203.0.113.0/24 src 203.0.113.5" in public  # connected
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ("10.1.2.3", "10.1.2.3"))
    cmds = [r.command for r in plan.routes]
    # Here the gateway lies in a class that goes nowhere already: no row of its own.
    assert not any("192.0.2.1/32 src" in c and "blackhole" in c for c in cmds)
    assert "route add default via 192.0.2.1 dev eth0 src 192.0.2.2 onlink" in cmds
    required = [r.required for r in plan.routes]
    assert required == sorted(required, reverse=True)  # all True, then all False
    optional = [r.command for r in plan.routes if not r.required]
    # DNS first; a duplicate allow-ip is not added twice.
    assert optional == [
        "route add 169.254.1.53/32 via 192.0.2.1 dev eth0 src 192.0.2.2 onlink",
        "route add 10.1.2.3/32 via 192.0.2.1 dev eth0 src 192.0.2.2 onlink",
    ]
    # The operator may allow the gateway itself: then it is reachable, not blackholed.
    allowed = [r.command for r in routes.build_plan(FACTS, routes.DNS_FORWARDER,
                                                    ("192.0.2.1",)).routes]
    assert "route add blackhole 192.0.2.1/32 src 192.0.2.2" not in allowed
    assert "route add 192.0.2.1/32 via 192.0.2.1 dev eth0 src 192.0.2.2 onlink" in allowed


def test_every_address_of_the_host_is_blackholed_whatever_its_range() -> None:
    host = ("198.51.100.7", "203.0.113.9", "10.0.0.5", "192.0.2.2", "198.51.100.128/25")
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ("203.0.113.9",), host)
    cmds = [r.command for r in plan.routes]
    assert "route add blackhole 198.51.100.7/32 src 192.0.2.2" in cmds
    assert "route add blackhole 198.51.100.128/25 src 192.0.2.2" in cmds  # an AnyIP range
    assert not any("192.0.2.2/32" in c for c in cmds)  # in a class that goes nowhere
    assert not any("10.0.0.5/32" in c for c in cmds)  # inside a blackholed range already
    assert not any(c.startswith("route add blackhole 203.0.113.9") for c in cmds)  # allow-ip
    assert readback.compare(plan, (), _readback(plan)) == []


def test_host_addresses_from_proc() -> None:
    fib_trie = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.0.2.0/24 2 0 2
        |-- 10.0.2.100
           /32 host LOCAL
     |-- 198.51.100.7
        /32 host LOCAL
  +-- 127.0.0.0/8 2 0 2
     |-- 127.0.0.1
        /32 host LOCAL
Local:
  |-- 10.0.2.100
     /32 host LOCAL
  |-- 198.51.100.128
     /25 host LOCAL
     /32 link BROADCAST
  |-- 127.0.0.0
     /8 host LOCAL
  |-- 203.0.113.9
     /32 host LOCAL tos=4
Id 100:
  |-- 0.0.0.0
     /0 host LOCAL
  |-- 192.88.99.1
     /32 host LOCAL
"""
    route = ("Iface\tDestination\tGateway \tFlags\n"
             "eth0\t00000000\t0202000A\t0003\n"
             "eth0\t0002000A\t00000000\t0001\n")
    assert routes.host_addresses(fib_trie, route) == (
        "10.0.2.100", "198.51.100.7", "198.51.100.128/25", "203.0.113.9", "10.0.2.2")


def test_local_table_prediction_matches_the_kernel() -> None:
    # What the kernel reported for table local in a pasta namespace here.
    seen = [
        ("local", "127.0.0.0/8", "lo", "host", "127.0.0.1"),
        ("local", "127.0.0.1/32", "lo", "host", "127.0.0.1"),
        ("broadcast", "127.255.255.255/32", "lo", "link", "127.0.0.1"),
        ("local", "192.0.2.2/32", "eth0", "host", "192.0.2.2"),
        ("broadcast", "192.0.2.255/32", "eth0", "link", "192.0.2.2"),
    ]
    assert set(routes.expected_local_table(FACTS.addresses)) == {
        routes.Route("local", kind, dst, dev=dev, prefsrc=src, scope=scope, protocol="kernel")
        for kind, dst, dev, scope, src in seen
    }


def test_exact_readback_is_accepted() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ("10.1.2.3",))
    assert readback.compare(plan, (), _readback(plan)) == []


def test_unplanned_route_missing_route_and_ipv6_are_refused() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ())
    extra = routes.Route("main", "unicast", "10.0.0.5/32", gateway="192.0.2.1", dev="eth0")
    assert any("unplanned" in p for p in readback.compare(plan, (), _readback(plan, [extra])))
    # An optional row the kernel refused must be absent, not assumed.
    dns_row = next(i for i, r in enumerate(plan.routes) if not r.required)
    assert any("unplanned" in p for p in readback.compare(plan, {dns_row}, _readback(plan)))
    v6 = routes.Route("main", "unicast", "::/0", gateway="fd00::1", dev="eth0")
    assert any("IPv6" in p for p in readback.compare(plan, (), _readback(plan, v6=[v6])))
    link_local = routes.Route("main", "unicast", "fe80::/64", dev="eth0", protocol="kernel",
                              metric=256, extra=(("cacheinfo", "00"), ("pref", "00")))
    assert readback.compare(plan, (), _readback(plan, v6=[link_local])) == []
    # A link-local destination that leads elsewhere (a nexthop object, several hops).
    for key in ("nhid", "multipath", "via", "encap"):
        led = routes.Route("main", "unicast", "fe80::/64", dev="eth0", extra=((key, "00"),))
        assert any("IPv6" in p for p in readback.compare(plan, (), _readback(plan, v6=[led])))


def test_route_in_another_table_or_extra_attribute_is_refused() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ())
    other = routes.Route("100", "unicast", "0.0.0.0/0", gateway="192.0.2.1", dev="eth0")
    assert readback.compare(plan, (), _readback(plan, [other]))
    first = plan.routes[0].expect
    changed = routes.Route(first.table, first.type, first.dst, first.gateway, first.dev,
                           first.prefsrc, first.scope, first.protocol, first.metric,
                           first.flags, (("nhid", "07000000"),))
    rb = routes.Readback((changed, *(r.expect for r in plan.routes[1:]), *plan.local),
                         RULES_V4, (), RULES_V6)
    assert readback.compare(plan, (), rb)


def test_extra_policy_rule_is_refused() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ())
    marked = (routes.Rule(0, "local", (("attribute 10", "01000000"),)), *RULES_V4[1:])
    for rules in ((routes.Rule(100, "100"), *RULES_V4), marked):
        problems = readback.compare(plan, (), _readback(plan, rules=rules))
        assert any("policy rules" in p for p in problems)


def test_facts_find_gateway_interface_and_copied_routes() -> None:
    addresses = (routes.Address("lo", "127.0.0.1", 8, True),
                 routes.Address("eth0", "192.0.2.2", 24, False))
    main = [
        routes.Route("main", "unicast", "0.0.0.0/0", gateway="192.0.2.1", dev="eth0"),
        routes.Route("main", "unicast", "192.0.2.0/24", dev="eth0", protocol="kernel",
                     scope="link", prefsrc="192.0.2.2"),
    ]
    facts = readback.facts(addresses, main)
    assert (facts.iface, facts.address, facts.gateway) == ("eth0", "192.0.2.2", "192.0.2.1")
    assert facts.copied == ("192.0.2.0/24",)
    with pytest.raises(SandboxError) as info:
        readback.facts(addresses, main[1:])
    assert info.value.status == EXIT_JAIL


def test_explain_plan_needs_no_namespace() -> None:
    lines = routes.explain_plan(allow_ip=("203.0.113.7",))
    assert lines[0].startswith("ip route flush table main")
    assert any("203.0.113.7/32" in line and "warns" in line for line in lines)
