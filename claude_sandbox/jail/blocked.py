"""The destinations the agent never reaches, one row per threat: the route plan
blackholes them (routes.py) and the egress proxy never connects to them (egressproxy.py).

Data only, and no imports beyond the record type: the proxy reads it at its start,
which overlaps the launch's.
"""

from __future__ import annotations

from claude_sandbox.core.record import record


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
