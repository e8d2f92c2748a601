"""Locking the jail's routes: read, programmed and read back through a routing socket
of the jail's namespace, and compared with the plan.

The agent never runs before this returns: `Jail.run` locks the routes and the
DNS filter before it asks the holder to become the session (checks 19 and 31;
docs/explanation/egress-jail.md). The socket is the kernel's own interface, which
`ip` speaks too; spoken here it costs no process (docs/adr/0004-launch-cost.md).
"""

from __future__ import annotations

import errno
import os

from claude_sandbox.core import paths
from claude_sandbox.core.errors import jail_error
from claude_sandbox.jail import readback, routemsg, routes
from claude_sandbox.jail.netlink import (
    NLM_F_CREATE,
    NLM_F_EXCL,
    RTM_DELROUTE,
    RTM_GETADDR,
    RTM_GETLINK,
    RTM_GETROUTE,
    RTM_GETRULE,
    RTM_NEWROUTE,
    Netlink,
)
from claude_sandbox.jail.spec import JailSpec
from claude_sandbox.jail.upstreamproxy import Upstream

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from collections.abc import Callable

    # A request to the holder and its reply (holder.py's frames).
    Ask = Callable[[list[str]], list[str]]
    Links = dict[int, tuple[str, bool]]


def lock_routes(routing: _socket.socket, ask: Ask, trace: Callable[[str], None],
                warn: Callable[[str], None], settings: JailSpec) -> routes.Plan:
    """Read the namespace, programme the plan's routes and read every table and rule
    back; refuse the launch where what the kernel holds differs (check 19)."""
    netlink = Netlink(routing)
    names = routemsg.links(netlink.dump(RTM_GETLINK, routemsg.LINK_DUMP))
    found = routemsg.addresses(netlink.dump(RTM_GETADDR, routemsg.ADDRESS_DUMP_V4), names)
    dumped = netlink.dump(RTM_GETROUTE, routemsg.dump_request(routemsg.AF_INET))
    main = [(body, route) for body in dumped
            if (route := routemsg.route(body, names)).table == "main"]
    facts = readback.facts(found, [route for _, route in main])
    # The upstream proxy's one address leaves like an allow-ip one; only the egress
    # proxy's marked sockets reach it (netfilter.py, upstreamproxy.py).
    chained = Upstream.decode(settings.upstream)
    plan = routes.build_plan(facts, paths.DNS_FORWARDER,
                             (*settings.allow_ip, *([chained.address] if chained else [])),
                             settings.host)
    trace("namespace read, plan built")
    v6 = ask(["ipv6off"])
    if v6[0] == "ok" and v6[1]:
        # Not fatal by itself: the read-back proves what IPv6 still holds.
        trace(f"IPv6 not fully switched off ({v6[1]})")
    failed = program(netlink, plan, [body for body, _ in main], names, warn)
    problems = readback.compare(plan, failed, read_back(netlink, names))
    if problems:
        raise jail_error("the routes read back differ from the plan; refusing to launch: "
                         + "; ".join(problems[:5]))
    trace("routes programmed and verified")
    return plan


def program(netlink: Netlink, plan: routes.Plan, main: list[bytes], names: Links,
            warn: Callable[[str], None]) -> set[int]:
    """Empty the main table (`main`: its routes as dumped, each sent back to be deleted,
    as `ip route flush` does), then add the plan's rows in order. The indexes of the
    optional rows the kernel refused; a refused required row refuses the launch."""
    for body in main:
        code = netlink.change(RTM_DELROUTE, 0, body)
        # ESRCH: no such route (any that is left is the read-back's to refuse).
        if code not in (0, errno.ESRCH):
            raise jail_error(f"route programming failed (removing a copied route: "
                             f"{os.strerror(code)})")
    failed: set[int] = set()
    for index, row in enumerate(plan.routes):
        code = netlink.change(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL,
                              routemsg.add_request(row.expect, names))
        if code == 0:
            continue
        if row.required:
            raise jail_error(f"cannot program `ip {row.command}` ({os.strerror(code)})")
        failed.add(index)
        warn(f"egress jail: could not add `ip {row.command}` ({row.why}: {os.strerror(code)}); "
             "skipped")
    return failed


def read_back(netlink: Netlink, names: Links) -> routes.Readback:
    """Every route of every table and every policy rule, of both families. A dump of
    one family may carry another's messages (a kernel without that family answers for
    all): each is read under its own family's dump only."""
    return routes.Readback(*_family(netlink, names, routemsg.AF_INET),
                           *_family(netlink, names, routemsg.AF_INET6))


def _family(netlink: Netlink, names: Links, family: int,
            ) -> tuple[tuple[routes.Route, ...], tuple[routes.Rule, ...]]:
    dumped = netlink.dump(RTM_GETROUTE, routemsg.dump_request(family))
    found = tuple(routemsg.route(body, names) for body in dumped
                  if routemsg.family_of(body) == family)
    dumped = netlink.dump(RTM_GETRULE, routemsg.dump_request(family))
    return found, tuple(routemsg.rule(body) for body in dumped
                        if routemsg.family_of(body) == family)
