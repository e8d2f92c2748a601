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
from claude_sandbox.core.errors import jail_error

# The filter table's rules, as iptables-save prints them.
_RULES = (
    f"-A OUTPUT -d {paths.DNS_FORWARDER}/32 -p udp -m udp --dport 53 -j ACCEPT",
    f"-A OUTPUT -d {paths.DNS_FORWARDER}/32 -p tcp -m tcp --dport 53 -j ACCEPT",
    f"-A OUTPUT -d {paths.DNS_FORWARDER}/32 -j REJECT --reject-with icmp-port-unreachable",
)
_CHAINS = ("INPUT", "FORWARD", "OUTPUT")


def request() -> list[str]:
    """The holder request that programmes the filter and prints it back.

    One run does both (`iptables-restore && iptables-save`): a separate read-back
    run right after the restore was seen to lose the holder's reply under CPU load.
    """
    restore, save = paths.tool("iptables-restore"), paths.tool("iptables-save")
    script = f"{restore} && exec {save} -t filter"
    table = ["*filter", *(f":{chain} ACCEPT [0:0]" for chain in _CHAINS), *_RULES, "COMMIT", ""]
    return ["run", "\n".join(table), paths.tool("sh"), "-c", script]


def check(reply: list[str]) -> None:
    """Refuse the launch unless the holder's answer shows exactly the planned filter."""
    if reply[0] != "ok" or reply[1] != "0":
        why = reply[1] if reply[0] != "ok" else reply[3].strip()
        raise jail_error(f"iptables failed ({why}); the DNS forwarder cannot be limited "
                         "to DNS; install the iptables package")
    saved = reply[2].splitlines()
    rules = [line for line in saved if line.startswith("-")]
    policies = [line.split()[:2] for line in saved if line.startswith(":")]
    problem = None
    if sorted(policies) != sorted([f":{chain}", "ACCEPT"] for chain in _CHAINS):
        problem = f"filter chains {policies}"
    elif tuple(rules) != _RULES:
        problem = f"filter rules {rules}"
    if problem:
        raise jail_error(f"the DNS filter read back differs ({problem}); refusing to launch")
