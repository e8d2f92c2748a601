"""The egress jail's inputs, as the launch plan holds them (launch/planner/plan.py)."""

from __future__ import annotations

from claude_sandbox.core.record import record
from claude_sandbox.jail.egresspolicy import Rule


@record
class JailSpec:
    allow_ip: tuple[str, ...]  # allow-ip: private destinations let through
    local_ports: tuple[int, ...]  # ports of the host's loopback reachable inside
    callback_ports: tuple[int, ...]  # ports inside reachable from the host's loopback
    host: tuple[str, ...] = ()  # every IPv4 address and gateway of the host: blackholed
    egress_policy: str = "allow-list"  # the egress proxy's mode (egresspolicy.MODES)
    rules: tuple[Rule, ...] = ()  # its allow-list (egresspolicy.rules_for)
    agent: str = ""
    hosts_file: str = "/etc/hosts"  # the names the proxy reads first; a test shows its own
    upstream: str = ""  # the proxy the network requires (upstreamproxy.Upstream.encode)
