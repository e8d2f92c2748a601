"""The jail's packet filter: everything the agent sends goes to the egress proxy or nowhere.

Two tables, which the holder writes and reads back through the kernel's x_tables
socket options (iptables.py), or, where the kernel has none, with iptables-restore and
iptables-save of the nf_tables back end in one run (check 31, check 75-81;
docs/explanation/egress-by-name.md):

- nat: every TCP connection to an address outside 127.0.0.0/8 is redirected to
  the proxy's listener, and every DNS query (UDP or TCP, to any address) to its
  resolver. The proxy's own upstream sockets carry MARK and pass unchanged.
- filter: what goes to 127.0.0.0/8 (the redirected connections, the relays)
  is let through, and what leaves by the loopback (the proxy's answers to the
  agent, sent to the jail's own address; a redirected packet keeps the device it
  was routed to first, so `-o lo` alone would not let it through); of the rest
  only the proxy's marked TCP, and its marked DNS to pasta's forwarder, leave.
  Everything else is refused by class: UDP other than DNS (QUIC falls back to
  TCP), ICMP, any TCP without the mark, and every port of the forwarder's
  address but 53 (pasta hands all of them to the host's resolver host).

Setting SO_MARK needs CAP_NET_ADMIN over the jail's network namespace, which the
proxy has (it is the holder's child, root in the holder's user namespace) and the
agent never has (bwrap drops every capability, and a user namespace the agent
makes is below the one that owns this network namespace). The filter needs only
the namespace, not pasta: the request goes to the holder as soon as pasta is
spawned (start.begin), and its answer is checked as the launcher takes the jail
over, before the routes are locked (session.Jail.run); a run of the nf_tables tools
is answered for once they are, before any relay inside and long before the agent
runs.
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.core.errors import jail_error

# The proxy's sockets inside the jail's namespace. Nothing else listens there
# before the agent starts, and the proxy binds them before the agent exists.
PROXY_PORT = 15001
RESOLVER_PORT = 15053
MARK = 0x6373  # "cs": the proxy's own upstream sockets (SO_MARK)
_MARK = f"-m mark --mark {MARK:#x}"
_DNS = paths.DNS_FORWARDER

# Each table's rules, as iptables-save prints them.
FILTER = (
    "-A OUTPUT -d 127.0.0.0/8 -j ACCEPT",
    "-A OUTPUT -o lo -j ACCEPT",
    f"-A OUTPUT -d {_DNS}/32 -p udp {_MARK} -m udp --dport 53 -j ACCEPT",
    f"-A OUTPUT -d {_DNS}/32 -p tcp {_MARK} -m tcp --dport 53 -j ACCEPT",
    f"-A OUTPUT -d {_DNS}/32 -j REJECT --reject-with icmp-port-unreachable",
    f"-A OUTPUT -p tcp {_MARK} -j ACCEPT",
    "-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset",
    "-A OUTPUT -j REJECT --reject-with icmp-port-unreachable",
)
NAT = (
    f"-A OUTPUT {_MARK} -j RETURN",
    f"-A OUTPUT -p udp -m udp --dport 53 -j REDIRECT --to-ports {RESOLVER_PORT}",
    f"-A OUTPUT -p tcp -m tcp --dport 53 -j REDIRECT --to-ports {RESOLVER_PORT}",
    f"-A OUTPUT ! -d 127.0.0.0/8 -p tcp -j REDIRECT --to-ports {PROXY_PORT}",
)
# nat first: iptables-restore commits table by table, and nat's module is the one a
# host most often lacks, so a legacy run that fails leaves nothing behind.
_TABLES = {
    "nat": (("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"), NAT),
    "filter": (("INPUT", "FORWARD", "OUTPUT"), FILTER),
}


def request() -> list[str]:
    """The holder request that writes both tables and reads them back (holder.py,
    `filter`): through the kernel's x_tables socket options where it has them
    (iptables.py), which costs no process and whose commit waits for nothing; else with
    the nf_tables tools, which the holder then starts (tool_request) and answers for
    with `["finish"]`, which session.py asks for once the routes are locked. Their
    commit waits for an RCU grace period, 25-35 ms of wall time in a new namespace
    (ADR 0004, "What the launch does for speed"). Both enforce the same rules, and each
    is read back from the back end that wrote it."""
    fields = ["filter"]
    for name, info, entries in tables():
        fields += [name, info.hex(), entries.hex()]
    return [*fields, *tool_request()[1:]]


Tables = tuple[tuple[str, bytes, bytes], ...]
_BUILT: list[Tables] = []


def tables() -> Tables:
    """The two tables as x_tables takes them (name, info, entries), nat first (_TABLES):
    built once a process, for the request and again for the read-back's comparison (a
    tuple: what is compared is what was sent)."""
    if not _BUILT:
        from claude_sandbox.jail import iptables

        nat = iptables.table((0, 1, 3, 4), iptables.nat_rules(MARK, PROXY_PORT, RESOLVER_PORT))
        kept = iptables.table((1, 2, 3), iptables.filter_rules(MARK))
        _BUILT.append((("nat", *nat), ("filter", *kept)))
    return _BUILT[0]


def tool_request() -> list[str]:
    """The holder request that starts the nf_tables tools on both tables and their
    read-back: one run does both (`iptables-restore && iptables-save`), as a separate
    read-back run right after the restore was seen to lose the holder's reply under CPU
    load."""
    restore, save = _fallback()
    lines = []
    for table, (chains, rules) in _TABLES.items():
        lines += [f"*{table}", *(f":{chain} ACCEPT [0:0]" for chain in chains), *rules, "COMMIT"]
    text = "\n".join([*lines, ""])
    return ["start", text, paths.tool("sh"), "-c", f"{restore} && exec {save}"]


def answer(reply: list[str]) -> int:
    """The holder's answer to request(): -1 where x_tables holds exactly the planned
    tables ("written", then each table's read-back), or a pidfd of the nf_tables tool it
    started instead (started()). Tables that read back otherwise, or not at all
    ("unread"), refuse the launch."""
    if reply[0] == "unread" and len(reply) == 2:
        raise jail_error(f"the packet filter was written and cannot be read back ({reply[1]}); "
                         "refusing to launch")
    if reply[0] != "written":
        return started(reply)
    from claude_sandbox.jail import iptables

    written = tables()
    if len(reply) != 1 + 2 * len(written):
        raise jail_error(f"the jail holder's answer to the packet filter is malformed: {reply}")
    for index, (name, info, entries) in enumerate(written):
        try:
            got_info, got = bytes.fromhex(reply[1 + 2 * index]), bytes.fromhex(reply[2 + 2 * index])
        except ValueError:
            got_info, got = b"", b""
        why = iptables.differences(info, entries, got_info, got)
        if why:
            raise jail_error(f"the packet filter read back differs ({name} table: {why}); "
                             "refusing to launch")
    return -1


def _fallback() -> tuple[str, str]:
    """The tools that write the tables where the legacy back end could not: the nf_tables
    ones by name where installed (`iptables-restore` may be the legacy one again, which
    would fail the same way and say something else), else `iptables-restore`."""
    nft = paths.find_tool("iptables-nft-restore"), paths.find_tool("iptables-nft-save")
    if nft[0] and nft[1]:
        return nft[0], nft[1]
    return paths.tool("iptables-restore"), paths.tool("iptables-save")


def _tables(saved: str) -> dict[str, tuple[list[list[str]], list[str]]]:
    """iptables-save's output, by table: (chain policies, rules)."""
    found: dict[str, tuple[list[list[str]], list[str]]] = {}
    current: tuple[list[list[str]], list[str]] | None = None
    for line in saved.splitlines():
        if line.startswith("*"):
            current = found.setdefault(line[1:], ([], []))
        elif current is not None and line.startswith(":"):
            current[0].append(line.split()[:2])
        elif current is not None and line.startswith("-"):
            current[1].append(line)
    return found


def started(reply: list[str]) -> int:
    """The holder's answer to tool_request(): a pidfd of the tool it started, which the
    launcher holds until the answer for it (`finish`; the holder reaps it then, and
    a launch that ends before reaps it itself: session.Jail.close). A tool that could
    not start refuses the launch, saying why."""
    if reply[0] == "ok" and len(reply) == 2 and reply[1].isdigit():
        return os.pidfd_open(int(reply[1]))
    if reply[0] != "ok":
        check(reply)
    raise jail_error(f"the jail holder's answer to the packet filter is malformed: {reply}")


def check(reply: list[str]) -> None:
    """Refuse the launch unless the holder's answer shows exactly the planned tables."""
    if reply[0] != "ok":  # the tool itself could not run
        raise jail_error(f"{reply[1]}; the agent's traffic cannot be sent through the egress "
                         "proxy; install the iptables package")
    if reply[1] != "0":
        why = reply[3].strip().splitlines()[-1:] or [f"exit {reply[1]}"]
        raise jail_error(f"iptables failed ({why[0]}); the agent's traffic cannot be sent "
                         "through the egress proxy: the kernel must provide netfilter's nat "
                         "table (nf_nat, nft_chain_nat, loaded on the host) and iptables must "
                         "be installed; `claude-sandbox doctor` checks both")
    saved = _tables(reply[2])
    problem = None
    if sorted(saved) != sorted(_TABLES):
        problem = f"tables {sorted(saved)}"
    for table, (chains, rules) in _TABLES.items():
        if problem:
            break
        policies, found = saved[table]
        if sorted(policies) != sorted([f":{chain}", "ACCEPT"] for chain in chains):
            problem = f"{table} chains {policies}"
        elif tuple(found) != rules:
            problem = f"{table} rules {found}"
    if problem:
        raise jail_error(f"the packet filter read back differs ({problem}); refusing to launch")
