"""Where the egress proxy may connect an allowed connection: never an address of a
blocked class (blocked.py: private, metadata, loopback, multicast, reserved, ...), never
a local address or range of the host, whatever the policy; and the marked upstream
socket it connects with.

The host's local addresses are asked of the host's own routing table at connect time,
over a netlink socket the launcher opened in its network namespace and handed over
with the policy: an address the host gained after the launch (or a range it answers
for, `ip route add local ... dev lo`) is refused as surely as one it had before. The
route plan (routes.py) blackholes those the host had at launch, a second layer.
"""

from __future__ import annotations

import _socket
import _thread

from claude_sandbox.jail import egressdns, netlink
from claude_sandbox.jail.blocked import BLOCKED
from claude_sandbox.jail.egresspolicy import Policy
from claude_sandbox.jail.tlshello import Malformed, hostname
from claude_sandbox.jail.upstreamproxy import Upstream, handshake

CONNECT_TIMEOUT = 10.0
_CLASSES = tuple((row.cidr, row.why) for row in BLOCKED)


def _as_int(address: str) -> int:
    return int.from_bytes(_socket.inet_aton(address), "big")


def _net(cidr: str) -> tuple[int, int]:
    base, _, bits = cidr.partition("/")
    mask = (0xFFFFFFFF << (32 - int(bits or 32))) & 0xFFFFFFFF
    return _as_int(base) & mask, mask


def _nets() -> tuple[tuple[int, int, str], ...]:
    return tuple((*_net(cidr), why) for cidr, why in _CLASSES)


_NETS = _nets()

# rtnetlink (linux/rtnetlink.h): one RTM_GETROUTE per address, answered with the route
# the host would use. These route types mean the host itself (or all of its link).
_RTA_DST = 1
# The errors a route lookup answers with when the host has no route it would use.
_NO_ROUTE = frozenset({101, 113, 13, 22})  # ENETUNREACH, EHOSTUNREACH, EACCES, EINVAL
_HOST_TYPES = {2: "local", 3: "broadcast", 4: "anycast", 5: "multicast"}
_NETLINK_TIMEOUT = 2.0


class HostRoutes:
    """The host's routing table, asked over a NETLINK_ROUTE socket of its namespace.

    The socket was opened by the launcher, so it sees the host's routes; it can only
    read them (a change would need CAP_NET_ADMIN over the host's namespace, which
    the proxy does not have). Workers share it, one question at a time.
    """

    def __init__(self, fd: int) -> None:
        self.sock = _socket.socket(fileno=fd)
        self.sock.settimeout(_NETLINK_TIMEOUT)
        self.lock = _thread.allocate_lock()
        self.seq = 0

    def kind(self, address: str) -> str | None:
        """The host's route type for `address` when it is the host's own ("local",
        "broadcast", ...), None when it is not; OSError when the host does not answer."""
        with self.lock:
            self.seq += 1
            # rtmsg (AF_INET, a /32 destination) and one RTA_DST attribute.
            body = bytes((_socket.AF_INET, 32)) + bytes(10)
            attr = netlink.attribute(_RTA_DST, _socket.inet_aton(address))
            self.sock.send(netlink.frame(netlink.RTM_GETROUTE, netlink.NLM_F_REQUEST, self.seq,
                                         body + attr))
            while True:
                reply = self.sock.recv(65536)
                if len(reply) < 16:
                    raise OSError("a short answer from the host's routing table")
                kind = int.from_bytes(reply[4:6], "little")
                if int.from_bytes(reply[8:12], "little") == self.seq:
                    break  # an answer to an earlier question that timed out is skipped
        if kind == netlink.NLMSG_ERROR:
            # No route the host would use (none, unreachable, prohibit, blackhole): not the
            # host's own. Any other answer is not understood, and refuses.
            error = netlink.error_of(reply[16:]) if len(reply) >= 20 else 0
            if error in _NO_ROUTE:
                return None
            raise OSError(f"the host's routing table answered error {error}")
        if kind != netlink.RTM_NEWROUTE or len(reply) < 28:
            raise OSError("an answer from the host's routing table that is not a route")
        return _HOST_TYPES.get(reply[16 + 7])


def address_refusal(policy: Policy, address: str,
                    host: HostRoutes | None = None) -> str | None:
    """Why the proxy must not connect to `address`; None when it may."""
    if address in policy.allow_ip:
        return None
    number = _as_int(address)
    for entry in policy.host:
        base, mask = _net(entry)
        if number & mask == base:
            return f"{address} is an address of the host"
    for base, mask, why in _NETS:
        if number & mask == base:
            return f"{address} is {why}"
    if host is not None:
        try:
            kind = host.kind(address)
        except OSError as exc:  # fail closed: an address the host may own is not reached
            return f"{address}: the host's routes cannot be asked ({exc})"
        if kind is not None:
            return f"{address} is the host's own now ({kind} route)"
    return None


def connect(policy: Policy, addresses: list[str], port: int,
            host: HostRoutes | None = None) -> tuple[_socket.socket | None, str]:
    """A marked upstream connection to the first usable address; (None, why) if none."""
    why = "no address"
    for address in addresses:
        refusal = address_refusal(policy, address, host)
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


def connect_through(policy: Policy, chained: Upstream, targets: list[str],
                    to_name: str | None, port: int,
                    host: HostRoutes | None = None) -> tuple[_socket.socket | None, str]:
    """An allowed connection through the upstream proxy, by CONNECT. The address classes
    hold as for a direct connection: the address asked for is one the egress proxy
    checked and would connect to itself.

    Under the allow-list the CONNECT names the judged name (a corporate proxy's own
    rules are by name; the proxy resolves it again, so an allowed name whose owner
    answers the proxy's resolver with a private address reaches it: documented).
    Under open and learn, where the agent chooses every name, it names the checked
    address: a name answered publicly here and privately at the proxy (DNS rebinding)
    would otherwise reach the network behind the proxy. A name that is not a plain host
    name never goes into the request line."""
    refusals = [address_refusal(policy, a, host) for a in targets]
    usable = [a for a, why in zip(targets, refusals, strict=True) if why is None]
    if not usable:
        return None, next(filter(None, refusals), "no address")
    target = usable[0]
    if to_name and not policy.open():
        try:
            target = hostname(to_name.encode("latin-1"))
        except (Malformed, UnicodeEncodeError):
            target = usable[0]
    sock = egressdns.marked(_socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT)
    try:
        sock.connect((chained.address, chained.port))
        handshake(sock, chained, target, port)
    except OSError as exc:
        sock.close()
        return None, f"through {chained.host}:{chained.port}: {exc.strerror or exc}"
    sock.settimeout(None)
    return sock, f"{target} through {chained.host}:{chained.port}"
