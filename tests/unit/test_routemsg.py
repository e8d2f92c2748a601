"""rtnetlink's framing and the route read-back's decoder, on bytes (no namespace)."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core.errors import EXIT_JAIL, SandboxError
from claude_sandbox.jail import netlink, readback, routemsg, routes
from claude_sandbox.jail.netlink import attribute, u32

FACTS = routes.NetFacts(
    iface="eth0", address="192.0.2.2", gateway="192.0.2.1",
    addresses=(routes.Address("lo", "127.0.0.1", 8, True),
               routes.Address("eth0", "192.0.2.2", 24, False)),
    copied=("10.88.0.0/16",))
NAMES = {1: ("lo", True), 2: ("eth0", False)}
PLAN = routes.build_plan(FACTS, routes.DNS_FORWARDER, ("203.0.113.7",))
_TABLE = 15  # RTA_TABLE


def _dumped(route: routes.Route) -> bytes:
    """A route as the kernel dumps it: the request's header and attributes, and the
    table as an attribute of its own."""
    table = 255 if route.table == "local" else 254
    return routemsg.add_request(route, NAMES) + attribute(_TABLE, u32(table))


def _rule(table: int, priority: int, *more: bytes) -> bytes:
    head = bytes([socket.AF_INET, 0, 0, 0, table, 0, 0, 1]) + bytes(4)
    tail = attribute(routemsg.FRA_TABLE, u32(table))
    tail += attribute(routemsg.FRA_SUPPRESS_PREFIXLEN, u32(0xFFFFFFFF))
    tail += attribute(routemsg.FRA_PROTOCOL, bytes([2]))
    if priority:
        tail += attribute(routemsg.FRA_PRIORITY, u32(priority))
    return head + tail + b"".join(more)


def test_every_planned_route_decodes_to_what_the_plan_expects() -> None:
    for row in (*(r.expect for r in PLAN.routes), *PLAN.local):
        assert routemsg.route(_dumped(row), NAMES) == row


def test_a_fresh_namespaces_rules_decode_without_extras() -> None:
    rules = [routemsg.rule(_rule(255, 0)), routemsg.rule(_rule(254, 32766)),
             routemsg.rule(_rule(253, 32767))]
    assert tuple((r.priority, r.table) for r in rules) == routes.EXPECTED_RULES_V4
    assert not any(r.extra for r in rules)
    marked = routemsg.rule(_rule(254, 32766, attribute(10, u32(1))))  # FRA_FWMARK
    assert marked.extra == (("attribute 10", "01000000"),)
    goto = routemsg.rule(bytes([socket.AF_INET, 0, 0, 0, 254, 0, 0, 2]) + bytes(4))
    assert goto.extra  # an action other than "look a table up"


def test_links_and_addresses_decode() -> None:
    def link(index: int, flags: int, name: bytes) -> bytes:
        return (bytes(4) + index.to_bytes(4, "little", signed=True) + u32(flags) + bytes(4)
                + attribute(routemsg.IFLA_IFNAME, name + b"\0"))

    names = routemsg.links([link(1, 0x49, b"lo"), link(2, 0x1043, b"eth0")])
    assert names == {1: ("lo", True), 2: ("eth0", False)}
    address = (bytes([socket.AF_INET, 24, 0, 0]) + u32(2)
               + attribute(routemsg.IFA_LOCAL, socket.inet_aton("192.0.2.2")))
    assert routemsg.addresses([address], names) == (routes.Address("eth0", "192.0.2.2", 24, False),)
    with pytest.raises(SandboxError):
        routemsg.addresses([address], {1: ("lo", True)})  # a link the dump lacked
    with pytest.raises(SandboxError):
        routemsg.links([link(3, 0, b"x")[:-4]])  # a name without its end


def test_a_modelled_attribute_twice_refuses_and_a_flagged_one_is_a_difference() -> None:
    row = PLAN.routes[0].expect
    dst = attribute(routemsg.RTA_DST, socket.inet_aton("10.0.0.0"))
    with pytest.raises(SandboxError):
        routemsg.route(_dumped(row) + dst, NAMES)
    flagged = attribute(routemsg.RTA_DST | 0x8000, socket.inet_aton("10.0.0.0"))
    assert routemsg.route(_dumped(row) + flagged, NAMES).extra
    with pytest.raises(SandboxError):
        routemsg.rule(_rule(254, 32766, attribute(routemsg.FRA_PRIORITY, u32(1))))


def test_framing_refuses_another_requests_answer_and_a_torn_message() -> None:
    message = netlink.frame(netlink.RTM_NEWROUTE, netlink.NLM_F_MULTI, 7, _dumped(PLAN.local[0]))
    ((kind, flags, body),) = netlink.split(message, 7)
    assert (kind, flags) == (netlink.RTM_NEWROUTE, netlink.NLM_F_MULTI)
    assert routemsg.route(body, NAMES) == PLAN.local[0]
    for bad in (message[:10], message[:-4], message + b"\x01"):
        with pytest.raises(SandboxError):
            netlink.split(bad, 7)
    with pytest.raises(SandboxError):
        netlink.split(message, 8)
    assert netlink.error_of((-13).to_bytes(4, "little", signed=True)) == 13


@settings(max_examples=300, deadline=None)
@given(index=st.integers(min_value=0, max_value=200),
       kind=st.integers(min_value=0, max_value=0xFFFF).filter(
           lambda k: k not in (1, 4, 5, 6, 7, _TABLE)),
       payload=st.binary(max_size=12))
def test_any_unmodelled_attribute_is_a_difference(index: int, kind: int, payload: bytes) -> None:
    rows = [r.expect for r in PLAN.routes] + list(PLAN.local)
    seen = [_dumped(r) for r in rows]
    target = index % len(seen)
    seen[target] += attribute(kind, payload)
    decoded = tuple(routemsg.route(body, NAMES) for body in seen)
    rb = routes.Readback(decoded, tuple(routes.Rule(p, t) for p, t in routes.EXPECTED_RULES_V4),
                         (), tuple(routes.Rule(p, t) for p, t in routes.EXPECTED_RULES_V6))
    assert readback.compare(PLAN, (), rb), f"accepted attribute {kind} on {rows[target]}"


@settings(max_examples=300, deadline=None)
@given(index=st.integers(min_value=0, max_value=200),
       at=st.sampled_from([0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11]), value=st.integers(0, 255))
def test_any_changed_header_field_is_refused_or_a_difference(index: int, at: int,
                                                              value: int) -> None:
    rows = [r.expect for r in PLAN.routes] + list(PLAN.local)
    seen = [bytearray(_dumped(r)) for r in rows]
    target = index % len(seen)
    if seen[target][at] == value:
        return
    seen[target][at] = value
    try:
        decoded = tuple(routemsg.route(bytes(body), NAMES) for body in seen)
    except SandboxError:
        return
    rb = routes.Readback(decoded, tuple(routes.Rule(p, t) for p, t in routes.EXPECTED_RULES_V4),
                         (), tuple(routes.Rule(p, t) for p, t in routes.EXPECTED_RULES_V6))
    assert readback.compare(PLAN, (), rb), f"accepted byte {at}={value} on {rows[target]}"


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_decoders_fail_only_with_a_sandbox_error(data: bytes) -> None:
    for decode in (lambda: routemsg.route(data, NAMES), lambda: routemsg.rule(data),
                   lambda: routemsg.links([data]), lambda: routemsg.addresses([data], NAMES),
                   lambda: netlink.split(data, 0)):
        try:
            decode()
        except SandboxError as error:
            assert error.status == EXIT_JAIL
