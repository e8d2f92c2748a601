"""The egress jail's route plan and read-back comparison, without a namespace."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _as_ip_json(route: routes.Route) -> dict[str, object]:
    """Render a Route the way `ip -j route show table all` prints it."""
    obj: dict[str, object] = {}
    if route.type != "unicast":
        obj["type"] = route.type
    obj["dst"] = "default" if route.dst == "0.0.0.0/0" else route.dst.removesuffix("/32")
    for key in ("gateway", "dev"):
        if getattr(route, key) is not None:
            obj[key] = getattr(route, key)
    if route.table != "main":
        obj["table"] = route.table
    if route.protocol != "boot":
        obj["protocol"] = route.protocol
    if route.scope != "global":
        obj["scope"] = route.scope
    if route.prefsrc is not None:
        obj["prefsrc"] = route.prefsrc
    obj["flags"] = list(route.flags)
    return obj


RULES_V4 = [
    {"priority": 0, "src": "all", "table": "local"},
    {"priority": 32766, "src": "all", "table": "main"},
    {"priority": 32767, "src": "all", "table": "default"},
]
RULES_V6 = [
    {"priority": 0, "src": "all", "table": "local"},
    {"priority": 32766, "src": "all", "table": "main"},
]


def _v6(routes_v6: list[dict[str, object]] | None = None) -> str:
    return json.dumps(routes_v6 or []) + "\n" + json.dumps(RULES_V6) + "\n"


def _readback_text(
    plan: routes.Plan,
    extra: list[dict[str, object]] | None = None,
    v6: list[dict[str, object]] | None = None,
) -> routes.Readback:
    shown = [_as_ip_json(r.expect) for r in plan.routes] + [_as_ip_json(r) for r in plan.local]
    text = json.dumps(shown + (extra or [])) + "\n" + json.dumps(RULES_V4) + "\n"
    return readback.parse_readback(text, _v6(v6))


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
    assert plan.batch().startswith("route flush table main\n")


def test_every_address_of_the_host_is_blackholed_whatever_its_range() -> None:
    host = ("198.51.100.7", "203.0.113.9", "10.0.0.5", "192.0.2.2", "198.51.100.128/25")
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ("203.0.113.9",), host)
    cmds = [r.command for r in plan.routes]
    assert "route add blackhole 198.51.100.7/32 src 192.0.2.2" in cmds
    assert "route add blackhole 198.51.100.128/25 src 192.0.2.2" in cmds  # an AnyIP range
    assert not any("192.0.2.2/32" in c for c in cmds)  # in a class that goes nowhere
    assert not any("10.0.0.5/32" in c for c in cmds)  # inside a blackholed range already
    assert not any(c.startswith("route add blackhole 203.0.113.9") for c in cmds)  # allow-ip
    assert readback.compare(plan, (), _readback_text(plan)) == []


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
    # What `ip -j route show table local` printed in a pasta namespace here.
    seen = [
        {"type": "local", "dst": "127.0.0.0/8", "dev": "lo", "table": "local",
         "protocol": "kernel", "scope": "host", "prefsrc": "127.0.0.1", "flags": []},
        {"type": "local", "dst": "127.0.0.1", "dev": "lo", "table": "local",
         "protocol": "kernel", "scope": "host", "prefsrc": "127.0.0.1", "flags": []},
        {"type": "broadcast", "dst": "127.255.255.255", "dev": "lo", "table": "local",
         "protocol": "kernel", "scope": "link", "prefsrc": "127.0.0.1", "flags": []},
        {"type": "local", "dst": "192.0.2.2", "dev": "eth0", "table": "local",
         "protocol": "kernel", "scope": "host", "prefsrc": "192.0.2.2", "flags": []},
        {"type": "broadcast", "dst": "192.0.2.255", "dev": "eth0", "table": "local",
         "protocol": "kernel", "scope": "link", "prefsrc": "192.0.2.2", "flags": []},
    ]  # fmt: skip
    assert set(routes.expected_local_table(FACTS.addresses)) == {
        readback.parse_route(o) for o in seen
    }


def test_exact_readback_is_accepted() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ("10.1.2.3",))
    assert readback.compare(plan, (), _readback_text(plan)) == []


def test_unplanned_route_missing_route_and_ipv6_are_refused() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ())
    extra = {"dst": "10.0.0.5", "gateway": "192.0.2.1", "dev": "eth0", "flags": []}
    assert any("unplanned" in p for p in readback.compare(plan, (), _readback_text(plan, [extra])))
    # An optional row that `ip` rejected must be absent, not assumed.
    dns_row = next(i for i, r in enumerate(plan.routes) if not r.required)
    assert any("unplanned" in p for p in readback.compare(plan, {dns_row}, _readback_text(plan)))
    v6 = {"dst": "default", "gateway": "fd00::1", "dev": "eth0", "flags": []}
    assert any("IPv6" in p for p in readback.compare(plan, (), _readback_text(plan, v6=[v6])))
    link_local = {
        "dst": "fe80::/64",
        "dev": "eth0",
        "protocol": "kernel",
        "metric": 256,
        "flags": [],
    }
    assert readback.compare(plan, (), _readback_text(plan, v6=[link_local])) == []


def test_route_in_another_table_or_extra_attribute_is_refused() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ())
    other = {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0", "table": "100", "flags": []}
    assert readback.compare(plan, (), _readback_text(plan, [other]))
    shown = [_as_ip_json(r.expect) for r in plan.routes] + [_as_ip_json(r) for r in plan.local]
    shown[0]["nhid"] = 7  # an attribute we never programmed
    rb = readback.parse_readback(json.dumps(shown) + json.dumps(RULES_V4), _v6())
    assert readback.compare(plan, (), rb)


def test_extra_policy_rule_is_refused() -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ())
    shown = [_as_ip_json(r.expect) for r in plan.routes] + [_as_ip_json(r) for r in plan.local]
    rules = [{"priority": 100, "src": "all", "table": "100"}, *RULES_V4]
    rb = readback.parse_readback(json.dumps(shown) + json.dumps(rules), _v6())
    assert any("policy rules" in p for p in readback.compare(plan, (), rb))


def test_failed_lines_parses_ip_force_output() -> None:
    err = "Error: Nexthop has invalid gateway.\nCommand failed -:13\nCommand failed -:x\n"
    assert readback.failed_lines(err) == {13}


def test_parse_facts_finds_gateway_interface_and_copied_routes() -> None:
    addr = [
        {"ifname": "lo", "flags": ["LOOPBACK", "UP"],
         "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
        {"ifname": "eth0", "flags": ["UP"],
         "addr_info": [{"family": "inet", "local": "192.0.2.2", "prefixlen": 24},
                       {"family": "inet6", "local": "fd00::2", "prefixlen": 64}]},
    ]  # fmt: skip
    main = [
        {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0", "flags": []},
        {"dst": "192.0.2.0/24", "dev": "eth0", "protocol": "kernel", "scope": "link",
         "prefsrc": "192.0.2.2", "flags": []},
    ]  # fmt: skip
    facts = readback.parse_facts(addr, main)
    assert (facts.iface, facts.address, facts.gateway) == ("eth0", "192.0.2.2", "192.0.2.1")
    assert facts.copied == ("192.0.2.0/24",)
    with pytest.raises(SandboxError) as info:
        readback.parse_facts(addr, main[1:])
    assert info.value.status == EXIT_JAIL


def test_explain_plan_needs_no_namespace() -> None:
    lines = routes.explain_plan(allow_ip=("203.0.113.7",))
    assert lines[0].startswith("ip route flush table main")
    assert any("203.0.113.7/32" in line and "warns" in line for line in lines)


# --- fuzz: the read-back parser never crashes, never accepts a mutation -----

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | json_values.map(json.dumps))
def test_parser_fails_only_with_a_sandbox_error(text: str) -> None:
    try:
        readback.parse_readback(text + json.dumps(RULES_V4), _v6())
    except SandboxError as error:
        assert error.status == EXIT_JAIL


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(min_value=0, max_value=100),
    key=st.sampled_from(
        ["type", "dst", "gateway", "dev", "prefsrc", "scope", "table", "metric", "via"]
    ),
    value=json_scalars,
)
def test_any_mutated_route_is_refused_or_rejected(index: int, key: str, value: object) -> None:
    plan = routes.build_plan(FACTS, routes.DNS_FORWARDER, ("10.1.2.3",))
    shown = [_as_ip_json(r.expect) for r in plan.routes] + [_as_ip_json(r) for r in plan.local]
    target = shown[index % len(shown)]
    before = readback.parse_route(target)
    target[key] = value
    text = json.dumps(shown) + json.dumps(RULES_V4)
    try:
        mutated = readback.parse_route(target)
        rb = readback.parse_readback(text, _v6())
    except SandboxError:
        return  # malformed: refused at parse time
    if mutated == before:
        return  # the mutation was a no-op after normalisation (e.g. same value)
    assert readback.compare(plan, (), rb), f"accepted mutated route {target}"
