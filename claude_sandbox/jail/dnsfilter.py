"""The jail's DNS filter: the forwarder's address answers DNS and nothing else (check 31).

pasta hands every connection to the forwarder's address to the host's resolver,
on any port: without a filter the resolver host's other services are one
connect() away. The jail's own filter table lets port 53 through and rejects
the rest; it is written with iptables-restore and read back with iptables-save,
in one run the holder makes. It needs only the namespace, not pasta: the request
goes to the holder as soon as pasta is spawned (start.begin), and its answer is
checked before the routes are locked and long before the agent runs
(session.Jail.run).
"""

from __future__ import annotations

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_JAIL, SandboxError


def request() -> list[str]:
    """The holder request that programmes the filter and prints it back.

    One run does both (`iptables-restore && iptables-save`): a separate read-back
    run right after the restore was seen to lose the holder's reply under CPU load.
    """
    restore, save = paths.tool("iptables-restore"), paths.tool("iptables-save")
    script = f"{restore} && exec {save} -t filter"
    return ["run", dns_filter_restore(paths.DNS_FORWARDER), paths.tool("sh"), "-c", script]


def check(reply: list[str]) -> None:
    """Refuse the launch unless the holder's answer shows exactly the planned filter."""
    if reply[0] != "ok" or reply[1] != "0":
        why = reply[1] if reply[0] != "ok" else reply[3].strip()
        raise SandboxError(f"egress jail: iptables failed ({why}); the DNS forwarder "
                           "cannot be limited to DNS; install the iptables package", EXIT_JAIL)
    problem = filter_differs(paths.DNS_FORWARDER, reply[2])
    if problem:
        raise SandboxError(f"egress jail: the DNS filter read back differs ({problem}); "
                           "refusing to launch", EXIT_JAIL)

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
