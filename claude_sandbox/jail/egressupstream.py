"""Where the egress proxy may connect an allowed connection: never an address of a
private, metadata, loopback, multicast or host class, whatever the policy (the route
allow-list below refuses them again); and the marked upstream socket it connects with.
"""

from __future__ import annotations

import _socket

from claude_sandbox.jail import egressdns
from claude_sandbox.jail.blocked import BLOCKED
from claude_sandbox.jail.egresspolicy import Policy

CONNECT_TIMEOUT = 10.0
# Address classes the proxy never connects to, whatever the policy (with the routes'
# block list): this network, loopback, multicast and the reserved block.
_CLASSES = (
    *((row.cidr, row.why) for row in BLOCKED),
    ("0.0.0.0/8", "this network"), ("127.0.0.0/8", "loopback"),
    ("224.0.0.0/4", "multicast"), ("240.0.0.0/4", "reserved"),
)


def _as_int(address: str) -> int:
    return int.from_bytes(_socket.inet_aton(address), "big")


def _nets() -> tuple[tuple[int, int, str], ...]:
    found = []
    for cidr, why in _CLASSES:
        base, bits = cidr.split("/")
        mask = (0xFFFFFFFF << (32 - int(bits))) & 0xFFFFFFFF
        found.append((_as_int(base) & mask, mask, why))
    return tuple(found)


_NETS = _nets()


def address_refusal(policy: Policy, address: str) -> str | None:
    """Why the proxy must not connect to `address`; None when it may."""
    if address in policy.allow_ip:
        return None
    if address in policy.host:
        return f"{address} is an address of the host"
    number = _as_int(address)
    for base, mask, why in _NETS:
        if number & mask == base:
            return f"{address} is {why}"
    return None


def connect(policy: Policy, addresses: list[str], port: int) -> tuple[_socket.socket | None, str]:
    """A marked upstream connection to the first usable address; (None, why) if none."""
    why = "no address"
    for address in addresses:
        refusal = address_refusal(policy, address)
        if refusal:
            why = refusal
            continue
        sock = egressdns.marked(_socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT)
        try:
            sock.connect((address, port))
        except OSError as exc:
            sock.close()
            why = f"{address}:{port}: {exc.strerror or exc}"
            continue
        sock.settimeout(None)
        return sock, address
    return None, why
