"""What the jail's namespace holds, compared with the plan (routes.py says why; check 19),
and the facts the plan is made from. routemsg.py decodes what the kernel reports.
Pure functions."""

from __future__ import annotations

from claude_sandbox.core.errors import jail_error
from claude_sandbox.jail import cidr
from claude_sandbox.jail.routemsg import NEXTHOPS
from claude_sandbox.jail.routes import (
    EXPECTED_RULES_V4,
    EXPECTED_RULES_V6,
    Address,
    NetFacts,
    Plan,
    Readback,
    Route,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

# IPv6 is switched off in the jail; where that fails, only these may remain.
_V6_HARMLESS = (
    cidr.network("fe80::/10"),  # link-local: reaches only pasta's tap
    cidr.network("ff00::/8"),  # multicast, link scope in practice
    cidr.network("::1/128"),  # the namespace's own loopback
)


def compare(plan: Plan, failed: Iterable[int], readback: Readback) -> list[str]:
    """Every difference between the plan and the read-back; empty means locked.

    `failed` holds indexes (into plan.routes) of optional rows the kernel refused;
    they must then be absent, not half-present.
    """
    skip = set(failed)
    want = [r.expect for i, r in enumerate(plan.routes) if i not in skip] + list(plan.local)
    problems: list[str] = []
    have_v4 = list(readback.routes_v4)
    for r in readback.routes_v6:
        net = cidr.network(r.dst)
        leads = r.gateway is not None or any(key in NEXTHOPS for key, _ in r.extra)
        if leads or not any(cidr.subnet_of(net, h) for h in _V6_HARMLESS):
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


def facts(addresses: tuple[Address, ...], main: Iterable[Route]) -> NetFacts:
    """NetFacts from the namespace's IPv4 addresses and its main table, as pasta
    configured them."""
    gateway = iface = None
    copied: list[str] = []
    for r in main:
        if r.dst == "0.0.0.0/0" and r.gateway and r.dev:
            gateway, iface = r.gateway, r.dev
        else:
            copied.append(r.dst)
    if gateway is None or iface is None:
        raise jail_error("pasta configured no IPv4 default route")
    own = [a for a in addresses if a.dev == iface]
    if not own:
        raise jail_error(f"pasta's interface {iface} has no IPv4 address")
    return NetFacts(iface, own[0].address, gateway, addresses, tuple(copied))
