"""The egress proxy's names: the agent's resolver, and the proxy's own lookups.

The agent's DNS, to any address, is redirected here (netfilter.py). A query for a
name the policy does not allow is answered here with NXDOMAIN and never leaves the
jail, so names the agent makes up carry nothing out (check 76). An allowed query is
asked again, rebuilt from its name and type alone (no extra sections, no options
the agent chose), of the resolver the container uses, through pasta's forwarder;
the addresses in the answer are noted, so that a later connection to one of them
is judged by the name it was asked as (other TCP, check 79).

The proxy's own lookups (for the name a TLS or HTTP client asked for) read the
container's /etc/hosts first, as its resolver does (so `--add-host` names work),
then the names this session already had answered, then the forwarder.
"""

from __future__ import annotations

import _socket
import _thread
import os
import time

from claude_sandbox.core.paths import DNS_FORWARDER
from claude_sandbox.jail import dnsmsg, egressrecord, netfilter
from claude_sandbox.jail.egresspolicy import Policy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Write = Callable[[dict[str, object]], None]  # Proxy.write: one record line

# Two tries over UDP, then one over TCP, all inside the 5 s a glibc client waits for
# an answer: it gets ours (or SERVFAIL) in time to try again itself.
UPSTREAM_TIMEOUT = 1.5
_ATTEMPTS = 2
_FRESH = 300.0  # seconds an answer is reused for the proxy's own connections
_TCP_IDLE = 10.0  # seconds a DNS-over-TCP client may wait between queries
_MAX_NOTED = 65536  # addresses remembered; beyond, the oldest half is forgotten


def marked(kind: int) -> _socket.socket:
    """A socket the jail's filter lets out unredirected (netfilter.MARK)."""
    sock = _socket.socket(_socket.AF_INET, kind | _socket.SOCK_CLOEXEC)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_MARK, netfilter.MARK)
    except OSError:
        sock.close()
        raise
    return sock


def parse_hosts(text: str) -> dict[str, list[str]]:
    """Each name's IPv4 addresses in a hosts file's text (egressstart.hosts_text), in
    order."""
    found: dict[str, list[str]] = {}
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        try:
            _socket.inet_pton(_socket.AF_INET, fields[0])  # strict: no octal, no short forms
        except OSError:
            continue  # IPv6, or not an address
        for name in fields[1:]:
            found.setdefault(name.lower().rstrip("."), []).append(fields[0])
    return found


def build_query(ident: int, name: str, qtype: int) -> bytes:
    """A standard recursive query for one name and type, class IN, nothing else."""
    labels = name.encode("latin-1").split(b".") if name else []
    encoded = b"".join(len(label).to_bytes(1, "big") + label for label in labels if label)
    header = ident.to_bytes(2, "big") + (0x0100).to_bytes(2, "big") + (1).to_bytes(2, "big")
    return header + bytes(6) + encoded + b"\0" + qtype.to_bytes(2, "big") + b"\0\1"


def _ask_udp(query: bytes) -> bytes | None:
    sock = marked(_socket.SOCK_DGRAM)
    try:
        sock.settimeout(UPSTREAM_TIMEOUT)
        sock.connect((DNS_FORWARDER, 53))
        for _ in range(_ATTEMPTS):
            sock.send(query)
            deadline = time.monotonic() + UPSTREAM_TIMEOUT
            while time.monotonic() < deadline:
                try:
                    reply = sock.recv(65535)
                except TimeoutError:
                    break
                if reply[:2] == query[:2]:
                    return reply
        return None
    finally:
        sock.close()


def _recv_exact(sock: _socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _ask_tcp(query: bytes) -> bytes | None:
    sock = marked(_socket.SOCK_STREAM)
    try:
        sock.settimeout(UPSTREAM_TIMEOUT)
        sock.connect((DNS_FORWARDER, 53))
        sock.sendall(len(query).to_bytes(2, "big") + query)
        head = _recv_exact(sock, 2)
        return None if head is None else _recv_exact(sock, int.from_bytes(head, "big"))
    finally:
        sock.close()


class Names:
    """What this session's DNS answered, both ways, and the container's /etc/hosts."""

    def __init__(self, hosts: dict[str, list[str]]) -> None:
        self.hosts = hosts
        self._lock = _thread.allocate_lock()
        self._by_address: dict[str, str] = {}
        self._by_name: dict[str, tuple[float, list[str]]] = {}
        for name, addresses in hosts.items():
            for address in addresses:
                self._by_address.setdefault(address, name)

    def note(self, name: str, addresses: list[str]) -> None:
        with self._lock:
            if len(self._by_address) > _MAX_NOTED:
                for old in list(self._by_address)[: _MAX_NOTED // 2]:
                    del self._by_address[old]
            for address in addresses:
                self._by_address[address] = name
            if addresses:
                if len(self._by_name) > _MAX_NOTED:
                    for old in list(self._by_name)[: _MAX_NOTED // 2]:
                        del self._by_name[old]
                self._by_name[name] = (time.monotonic(), addresses)

    def name_of(self, address: str) -> str | None:
        with self._lock:
            return self._by_address.get(address)

    def lookup(self, name: str) -> list[str]:
        """The IPv4 addresses of `name`, as the container resolves it."""
        if name in self.hosts:
            return list(self.hosts[name])
        with self._lock:
            fresh = self._by_name.get(name)
        if fresh and time.monotonic() - fresh[0] < _FRESH:
            return list(fresh[1])
        query = build_query(int.from_bytes(os.urandom(2), "big"), name, dnsmsg.A)
        try:
            reply = _ask_udp(query)
            found = [] if reply is None else _addresses(reply)
        except (OSError, dnsmsg.Malformed):
            found = []
        self.note(name, found)
        return found

    def forward(self, query: dnsmsg.Query, tcp: bool) -> bytes | None:
        """Ask upstream for an allowed query, rebuilt; the answer under the agent's id."""
        ours = build_query(int.from_bytes(os.urandom(2), "big"), query.name, query.qtype)
        reply = None
        for ask in ((_ask_tcp,) if tcp else (_ask_udp, _ask_tcp)):
            try:
                reply = ask(ours)
            except OSError:
                reply = None
            if reply is not None:
                break
        if reply is None or len(reply) < 12:
            return dnsmsg.refusal(query, dnsmsg.SERVFAIL)
        try:
            self.note(query.name, _addresses(reply))
        except dnsmsg.Malformed:
            pass
        return query.ident.to_bytes(2, "big") + reply[2:]


def _addresses(reply: bytes) -> list[str]:
    return [_socket.inet_ntoa(raw) for _, raw in dnsmsg.answer_addresses(reply) if len(raw) == 4]


def answer(names: Names, policy: Policy, write: Write, data: bytes, tcp: bool) -> bytes | None:
    """The agent's query answered: forwarded when its name is allowed, else NXDOMAIN;
    recorded either way."""
    try:
        query = dnsmsg.parse_query(data)
    except dnsmsg.Malformed:
        return dnsmsg.formerr(data)
    allowed = policy.names_allowed(query.name)
    write({"kind": "dns", "time": egressrecord.utc(), "name": query.name, "port": 53,
                 "address": None, "upstream": None, "qtype": query.qtype,
                 "verdict": "allowed" if allowed else "refused",
                 "rule": (f"egress-policy = {policy.mode}" if policy.open()
                          else "a name on the allow-list" if allowed
                          else f"{query.name} is not on the allow-list"),
                 "fix": "" if allowed else f"allow-domain = {query.name}",
                 "sent": len(data), "received": 0, "seconds": 0})
    if not allowed:
        return dnsmsg.refusal(query)
    if query.name in names.hosts:
        # The container's own names (its /etc/hosts, --add-host), answered as its
        # resolver would: never asked upstream.
        return dnsmsg.local_answer(query, names.hosts[query.name])
    if query.qtype == dnsmsg.AAAA:
        # IPv6 is off in the jail (check 28): an AAAA answer is of no use inside, and a
        # slow or failing upstream AAAA makes glibc fail the whole lookup.
        return dnsmsg.local_answer(query, [])
    return names.forward(query, tcp)


def serve_udp_query(names: Names, policy: Policy, write: Write, sock: _socket.socket,
                    data: bytes, peer: tuple[str, int]) -> None:
    reply = answer(names, policy, write, data, tcp=False)
    if reply is not None:
        try:
            sock.sendto(reply, peer)
        except OSError:
            pass


def serve_tcp(names: Names, policy: Policy, write: Write, conn: _socket.socket) -> None:
    """DNS over TCP (a client whose UDP answer was truncated): one query after another."""
    conn.settimeout(_TCP_IDLE)
    try:
        while (head := _recv_exact(conn, 2)) is not None:
            data = _recv_exact(conn, int.from_bytes(head, "big"))
            reply = None if data is None else answer(names, policy, write, data, tcp=True)
            if reply is None:
                return
            conn.sendall(len(reply).to_bytes(2, "big") + reply)
    except OSError:
        return
    finally:
        conn.close()
