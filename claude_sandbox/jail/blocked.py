"""The destinations the agent never reaches, by address class: the route plan blackholes
them (routes.py) and the egress proxy never connects to them (egressupstream.py).

The rule is "global unicast and nothing else": every block of the IANA IPv4
special-purpose registry, multicast and the cloud metadata addresses, one row each
(docs/explanation/egress-jail.md, check 31). Two documentation blocks are left
reachable on purpose: 198.51.100.0/24 and 203.0.113.0/24 are used by no real host,
and test networks (the project's own test internet, a mirror a build machine
reaches its package registries through) live there. `allow-ip` is the only other
exception.

Data only, and no imports beyond the record type: the proxy reads it at its start,
which overlaps the launch's.
"""

from __future__ import annotations

from claude_sandbox.core.record import record


@record
class Blocked:
    """One destination class the agent must never reach, and why."""

    cidr: str
    kind: str  # "blackhole" (silent drop) or "unreachable" (fast ICMP-style error)
    why: str
    routed: bool = True  # False: the kernel's local table answers first (loopback)


# The block list, one row per class. Order is the order programmed; the kernel's
# longest-prefix match, not this order, decides precedence.
BLOCKED: tuple[Blocked, ...] = (
    Blocked("10.0.0.0/8", "blackhole", "RFC 1918 private network"),
    Blocked("172.16.0.0/12", "blackhole", "RFC 1918 private network"),
    Blocked("192.168.0.0/16", "blackhole", "RFC 1918 private network"),
    Blocked("100.64.0.0/10", "blackhole", "RFC 6598 carrier-grade NAT (cloud VPCs, tailnets)"),
    Blocked("169.254.0.0/16", "unreachable", "link-local, instance metadata services"),
    Blocked("168.63.129.16/32", "blackhole", "Azure WireServer"),
    Blocked("100.100.100.200/32", "blackhole", "Alibaba Cloud metadata service"),
    Blocked("0.0.0.0/8", "unreachable", "RFC 791 'this network': some stacks mean the host"),
    Blocked("192.0.0.0/24", "unreachable", "IETF protocol assignments (NAT64, PCP, TURN)"),
    Blocked("192.0.2.0/24", "unreachable", "TEST-NET-1 documentation (pasta's own link)"),
    Blocked("192.31.196.0/24", "unreachable", "AS112 DNS sink"),
    Blocked("192.52.193.0/24", "unreachable", "AMT multicast relays"),
    Blocked("192.88.99.0/24", "unreachable", "6to4 relay anycast (deprecated)"),
    Blocked("192.175.48.0/24", "unreachable", "AS112 direct delegation"),
    Blocked("198.18.0.0/15", "unreachable", "RFC 2544 benchmarking: lab and proxy fabrics"),
    Blocked("224.0.0.0/4", "unreachable", "multicast: every listener on the host's network"),
    Blocked("240.0.0.0/4", "unreachable", "reserved, and 255.255.255.255 broadcast"),
    Blocked("127.0.0.0/8", "unreachable", "loopback", routed=False),
)
