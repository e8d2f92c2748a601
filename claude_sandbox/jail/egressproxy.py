"""The egress proxy: every TCP connection and DNS query of the agent, judged by name.

The holder forks it before it becomes the session (holder.py, `proxy`), so it runs
in the jail's network namespace but outside bwrap's pid namespace: the agent can
neither see it in /proc nor signal or trace it (check 81). The packet filter sends
the agent's TCP to PROXY_PORT and its DNS to RESOLVER_PORT, and lets out only what
carries the proxy's mark (netfilter.py). So when the proxy is gone, nothing gets
out: its death ends the agent's reach, never opens it.

A connection is judged (egresspolicy.judge) by the name it asks for:
- TLS by the ClientHello's server name, HTTP by its Host header (check 75);
- other TCP by the name this session's DNS answered for the address, and only
  when a rule names the port (check 79);
- an address the operator allowed (allow-ip) by itself.
An allowed TLS or HTTP connection goes to the name, resolved here, never to the
address the agent connected to: an allowed name sent to another address reaches
the allowed host (checks 77, 78). Whatever the policy, an upstream address of a
private, metadata, loopback or host class is refused, and the route allow-list
below refuses it again. A refused TLS client gets an access_denied alert, an HTTP
client a 403 saying which rule and what line would allow it; other TCP a reset.
Where the launching environment named a proxy the network requires, an allowed
connection goes through it with CONNECT (upstreamproxy.py), after the same judgement;
the agent's own connections to that proxy are refused.

It lives as long as the launcher's end of its control socket: the launcher sends
the policy and the record's descriptor, and when that socket closes (the session
ended, or the launcher died) the proxy records what is still open and exits.
"""

from __future__ import annotations

# The C modules, not `socket` (it imports enum), `threading` and `queue`: the proxy
# starts while the launch goes on, on the same cores.
import _queue
import _socket
import _thread
import os
import select
import time

from claude_sandbox.jail import (
    egressdns,
    egresshttp,
    egresspolicy,
    egressrecord,
    egressrelay,
    upstreamproxy,
)
from claude_sandbox.jail.egressclient import read_first, refuse_tcp, tell_refused
from claude_sandbox.jail.egresspolicy import Policy, Verdict
from claude_sandbox.jail.egressupstream import (
    HostRoutes,
    address_refusal,
    connect,
    connect_through,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_OPEN = 4096  # connections and queries served at once; beyond, refused at once
_IDLE_MAX = 32  # workers kept waiting for the next connection
_FDS_EACH = 6  # a relayed connection holds two sockets and two pipes
_STACK = 256 << 10
class Proxy:
    """The listeners, the policy, the record, and what is open now."""

    def __init__(self, policy: Policy, record_fd: int, names: egressdns.Names,
                 broker: Any = None, host: HostRoutes | None = None) -> None:
        self.policy, self.record_fd, self.names = policy, record_fd, names
        self.host = host  # the host's routing table, asked at connect time
        self.upstream = upstreamproxy.Upstream.decode(policy.upstream)
        self.broker = broker  # egressinject.Broker when the launch brokers credentials
        self.lock = _thread.allocate_lock()
        self.open: dict[int, dict[str, object]] = {}  # id(entry) -> entry, for the end
        self.free = _capacity()  # connections and queries that may be served at once
        self.tasks: _queue.SimpleQueue[tuple[object, tuple[object, ...]]] = _queue.SimpleQueue()
        self.idle = 0  # workers waiting on `tasks`, less the tasks already put for them
        self.record_full = False

    def write(self, entry: dict[str, object]) -> None:
        data = egressrecord.line(entry)
        with self.lock:
            if self.record_full:
                return
            if os.fstat(self.record_fd).st_size + len(data) > egressrecord.MAX_BYTES:
                self.record_full = True
                data = egressrecord.line({"kind": "cut", "time": egressrecord.utc(),
                                          "why": "the record reached its size limit"})
            os.write(self.record_fd, data)

    def start(self, owned: _socket.socket | None, target: object, *args: object) -> None:
        """Serve in a worker thread: an idle one when there is one (starting a thread
        costs about 0.2 ms, on every connection's path), else a new one. When no slot
        is free, or no thread can be started (a pids cap the sandbox filled), close
        `owned`, the one connection this is for (a UDP query has none: it is dropped,
        and the shared socket stays)."""
        with self.lock:
            taken = self.free > 0
            idle = taken and self.idle > 0
            if taken:
                self.free -= 1
            if idle:
                self.idle -= 1  # that worker's next task is this one
        if not taken:
            if owned is not None:
                owned.close()
            return
        if idle:
            self.tasks.put((target, args))
            return
        try:
            _thread.start_new_thread(self._work, (target, args))
        except RuntimeError:
            with self.lock:
                self.free += 1
            if owned is not None:
                owned.close()

    def _work(self, target: object, args: tuple[object, ...]) -> None:
        """Serve one task, then wait for more; a worker beyond _IDLE_MAX idle ones ends."""
        while True:
            try:
                target(*args)  # type: ignore[operator]
            except Exception:  # one connection's fault ends only that connection
                pass
            with self.lock:
                self.free += 1
                if self.idle >= _IDLE_MAX:
                    return
                self.idle += 1
            target, args = self.tasks.get()

    def finish(self) -> None:
        """The session ended: record what is still open, as it stands."""
        with self.lock:
            still = list(self.open.values())
        for entry in still:
            self.write({**entry, "cut": True})


def _capacity() -> int:
    """How many connections fit the descriptor limit, raised to its hard limit first:
    a flood is refused at the door, never met with EMFILE halfway through."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return max(16, min(MAX_OPEN, (soft - 64) // _FDS_EACH))


def serve_connection(proxy: Proxy, conn: _socket.socket) -> None:
    policy = proxy.policy
    started = time.monotonic()
    entry: dict[str, object] = {"kind": "tcp", "time": egressrecord.utc(), "name": None,
                                "port": 0, "address": None, "upstream": None}
    upstream = None
    try:
        address, port = egressrelay.original_destination(conn)
        entry.update(port=port, address=address)
        dns_name = proxy.names.name_of(address)
        verdict, first, targets, to_name = _decide(proxy, conn, entry, address, port, dns_name)
        entry.update(verdict="allowed" if verdict.allowed else "refused", rule=verdict.rule,
                     fix=verdict.fix)
        chained = proxy.upstream
        if chained is not None and (address in policy.allow_ip
                                    or upstreamproxy.exempt(chained, to_name, address)):
            chained = None  # by number, or NO_PROXY: direct, as the tools would go
        if verdict.allowed and chained is not None:
            upstream, why = connect_through(policy, chained, targets, to_name, port,
                                            proxy.host)
        elif verdict.allowed:
            upstream, why = connect(policy, targets, port, proxy.host)
        if verdict.allowed and upstream is None:
            entry.update(verdict="refused", rule=f"upstream: {why}", fix="")
        if upstream is None:
            tell_refused(conn, entry)
            return
        entry["upstream"] = why
        with proxy.lock:
            proxy.open[id(entry)] = entry
        broker = proxy.broker
        if broker is not None and entry["kind"] == "http" and broker.seen(first):
            entry["other_sentinels"] = broker.seen(first)  # sent in the clear: not injected
        if broker is not None and entry["kind"] == "tls" and broker.terminates(entry["name"], port):
            sent, received = broker.serve(conn, upstream, entry["name"], first, entry)
        elif entry["kind"] == "http" and not policy.open():
            # Judged by its Host: every later request on it must be for the same host.
            sent, received = egresshttp.relay(conn, upstream, first, str(entry["name"]), port,
                                              entry)
        else:
            sent, received = egressrelay.relay(conn, upstream, first)
        entry.update(sent=sent, received=received)
    except OSError as exc:
        entry.setdefault("verdict", "refused")
        entry.setdefault("rule", f"proxy: {exc.strerror or exc}")
        if upstream is None:
            refuse_tcp(conn)  # a reset, never a clean end that reads as served
    finally:
        with proxy.lock:
            proxy.open.pop(id(entry), None)
        entry["seconds"] = round(time.monotonic() - started, 3)
        entry.setdefault("fix", "")
        entry.setdefault("sent", 0)
        entry.setdefault("received", 0)
        if "verdict" in entry:
            proxy.write(entry)
        conn.close()
        if upstream is not None:
            upstream.close()


def _decide(proxy: Proxy, conn: _socket.socket, entry: dict[str, object], address: str,
            port: int, dns_name: str | None) -> tuple[Verdict, bytes, list[str], str | None]:
    """The verdict, the client's first bytes, where an allowed connection goes, and the
    name an upstream proxy's CONNECT asks for: the judged name, or the one this session's
    DNS gave for the address; never a name the client claimed for an address that name
    does not have."""
    verdict, first, targets = _judge(proxy, conn, entry, address, port, dns_name)
    name = entry.get("name")
    return verdict, first, targets, name if isinstance(name, str) and not entry.get(
        "claimed") else None


def _judge(proxy: Proxy, conn: _socket.socket, entry: dict[str, object], address: str,
           port: int, dns_name: str | None) -> tuple[Verdict, bytes, list[str]]:
    policy = proxy.policy
    if address.startswith("127."):
        # Only a connection made to the listener itself has no redirect behind it.
        return Verdict(False, "a connection to the proxy itself", ""), b"", []
    upstream = proxy.upstream
    if upstream is not None and address == upstream.address and port == upstream.port:
        # The agent's own CONNECT there would pass every name through unjudged.
        return Verdict(False, "the upstream proxy: only the egress proxy talks to it", ""), \
            b"", []
    # By class and the host's addresses at launch; the host's routing table is asked once,
    # for the address actually connected to (egressupstream.connect).
    refusal = address_refusal(policy, address)
    if refusal:  # the private network, metadata, the host: refused at once, by class
        return Verdict(False, refusal, f"allow-ip = {address}"), b"", []
    if address in policy.allow_ip:
        entry["name"] = dns_name
        return Verdict(True, f"allow-ip = {address}", ""), b"", [address]
    if not policy.open() and dns_name:
        # Not 80 or 443, even with a NAME:443 line: there the name read decides.
        by_port = tuple(r for r in policy.rules if not set(r.ports) & set(egresspolicy.WEB_PORTS))
        verdict = egresspolicy.judge(by_port, dns_name, port)
        if verdict.allowed:  # other TCP, by the name DNS answered, with its port line
            entry["name"] = dns_name
            return verdict, b"", [address]
    if policy.open() and port not in egresspolicy.WEB_PORTS:
        # A server may speak first (ssh, SMTP, MySQL): no waiting for the client.
        entry["name"] = dns_name
        return Verdict(True, f"egress-policy = {policy.mode}", ""), b"", [address]
    kind, name, first, why = read_first(conn)
    entry.update(kind=kind, name=name or dns_name)
    brokered = proxy.broker is not None and kind == "tls" and proxy.broker.terminates(name, port)
    if policy.open() and not brokered:  # a credential's host goes to the name, as below
        # It goes where the agent sent it; a name it claimed for an address that name
        # does not have is marked, so learn never offers it (egressrecord.learned).
        if name and name != dns_name and address not in proxy.names.lookup(name):
            entry["claimed"] = True
        return Verdict(True, f"egress-policy = {policy.mode}", ""), first, [address]
    if kind == "tcp" or name is None:
        verdict = egresspolicy.judge(policy.rules, None, port)
        if kind == "tcp" and dns_name:
            verdict = Verdict(False, f"other TCP to {dns_name}:{port} needs a line with "
                              "its port", f"allow-domain = {dns_name}:{port}")
        elif why:
            verdict = Verdict(False, f"{why}; {verdict.rule}", verdict.fix)
        return verdict, first, []
    # Under open and learn only a credential's host comes here: to the name, as below.
    verdict = Verdict(True, f"egress-policy = {policy.mode}", "") if policy.open() \
        else egresspolicy.judge(policy.rules, name, port)
    if not verdict.allowed:
        return verdict, first, []
    targets = proxy.names.lookup(name)
    if not targets:
        return Verdict(False, f"{name} does not resolve", ""), first, []
    return verdict, first, targets


def serve(proxy: Proxy, control: _socket.socket,
          sockets: tuple[_socket.socket, _socket.socket, _socket.socket]) -> None:
    """Accept until the control socket closes; then record what is open."""
    tcp, udp, tcp_dns = sockets
    poller = select.poll()
    for sock in (control, tcp, udp, tcp_dns):
        poller.register(sock.fileno(), select.POLLIN)
    for sock in sockets:
        sock.setblocking(False)  # a connection gone before accept() must not block the loop
    while True:
        for fd, events in poller.poll():
            if events & (select.POLLNVAL | select.POLLERR):
                return  # a listener is gone: the proxy ends, and with it the agent's reach
            if fd == control.fileno():
                if not control.recv(1):
                    proxy.finish()
                    return
            elif fd == udp.fileno():
                try:
                    data, peer = udp.recvfrom(65535)
                except OSError:  # BlockingIOError included
                    continue
                proxy.start(None, egressdns.serve_udp_query, proxy.names, proxy.policy,
                            proxy.write, udp, data, peer)
            else:
                listener = tcp if fd == tcp.fileno() else tcp_dns
                try:
                    fd, _ = listener._accept()  # type: ignore[attr-defined]  # socket.accept's own call
                except OSError:
                    continue  # EMFILE under a flood: the next poll tries again
                conn = _socket.socket(fileno=fd)
                conn.setblocking(True)
                if listener is tcp:
                    proxy.start(conn, serve_connection, proxy, conn)
                else:
                    proxy.start(conn, egressdns.serve_tcp, proxy.names, proxy.policy,
                                proxy.write, conn)


def start(policy: Policy, hosts: str, record_fd: int, routes_fd: int, broker: Any,
          control: _socket.socket,
          sockets: tuple[_socket.socket, _socket.socket, _socket.socket]) -> None:
    """The proxy's second half (egressstart.py loads it on the first connection or
    query): the names of `hosts` (the hosts file's text, read as the proxy started), the
    host's routing table, and the serving loop until the control socket closes."""
    _thread.stack_size(_STACK)
    names = egressdns.Names(egressdns.parse_hosts(hosts))
    serve(Proxy(policy, record_fd, names, broker, HostRoutes(routes_fd)), control, sockets)
