"""The egress proxy's terminated connections: TLS to a credential's hosts, opened here.

For a connection whose server name is one of a brokered credential's hosts (on 443),
the proxy answers the agent's TLS itself, with the leaf certificate made for those
hosts (launch/session/tlsca.py), which only the sandbox trusts. It opens its own TLS to the
real host, verified against the container's trust store, offers only HTTP/1.1 on
both sides, and passes the requests through httpinject.Requests, which puts the real
value back for this host's sentinels in the credential headers. The answers come back
unread. Every other connection stays spliced and unread (egressrelay.py).

Both TLS objects work over memory buffers (ssl.MemoryBIO) in one thread's poll loop:
an SSL object is never used from two threads at once.
"""

from __future__ import annotations

import _socket
import select
import ssl

from claude_sandbox.jail.httpinject import Malformed, Requests

_READ = 256 << 10
HANDSHAKE_WAIT = 10.0


class Broker:
    """The proxy's certificate and trust, and the session's sentinels by host."""

    def __init__(self, chain: str, key: str, trust: str,
                 secrets: list[tuple[str, str, tuple[str, ...]]]) -> None:
        self.server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server.minimum_version = ssl.TLSVersion.TLSv1_2
        self.server.load_cert_chain(chain, key)
        self.server.set_alpn_protocols(["http/1.1"])
        self.client = ssl.create_default_context(cafile=trust)
        self.client.set_alpn_protocols(["http/1.1"])
        self.by_host: dict[str, dict[bytes, bytes]] = {}
        for sentinel, real, hosts in secrets:
            for host in hosts:
                self.by_host.setdefault(host, {})[sentinel.encode()] = real.encode()
        self.sentinels = tuple(s.encode() for s, _, _ in secrets)

    def terminates(self, name: object, port: int) -> bool:
        return port == 443 and isinstance(name, str) and name in self.by_host

    def serve(self, conn: _socket.socket, upstream: _socket.socket, name: str, first: bytes,
              entry: dict[str, object]) -> tuple[int, int]:
        return serve(self, conn, upstream, name, first, entry)

    def seen(self, data: bytes) -> int:
        """How many of the session's sentinels are in `data` (a plaintext head)."""
        return sum(data.count(s) for s in self.sentinels)


def from_fields(fields: list[str]) -> Broker | None:
    """The broker from the policy frame's tail: [chain, key, trust, N, (sentinel, real,
    hosts)*N], or None when the launch brokers nothing."""
    if not fields:
        return None
    chain, key, trust, count = fields[0], fields[1], fields[2], int(fields[3])
    rows = fields[4:]
    if len(rows) != 3 * count:
        raise ValueError("not a broker")
    secrets = [(rows[i], rows[i + 1], tuple(rows[i + 2].split(",")))
               for i in range(0, len(rows), 3)]
    return Broker(chain, key, trust, secrets)


class _Side:
    """One TLS end over a socket: bytes in and out through memory buffers."""

    def __init__(self, sock: _socket.socket, context: ssl.SSLContext, server: bool,
                 name: str | None) -> None:
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=server,
                                    server_hostname=name)

    def flush(self) -> None:
        data = self.outgoing.read()
        if data:
            self.sock.sendall(data)

    def handshake(self, first: bytes = b"") -> None:
        if first:
            self.incoming.write(first)
        self.sock.settimeout(HANDSHAKE_WAIT)
        while True:
            try:
                self.tls.do_handshake()
                self.flush()
                break
            except ssl.SSLWantReadError:
                self.flush()
                data = self.sock.recv(_READ)
                if not data:
                    raise ConnectionError("closed during the handshake") from None
                self.incoming.write(data)
        self.sock.settimeout(None)

    def receive(self) -> tuple[bytes, bool]:
        """(plaintext now readable, whether the peer has ended)."""
        data = self.sock.recv(_READ)
        if not data:
            self.incoming.write_eof()
        else:
            self.incoming.write(data)
        plain, ended = self.buffered()
        return plain, ended or not data

    def buffered(self) -> tuple[bytes, bool]:
        """(plaintext already in the incoming buffer, whether the peer has ended): a
        client's first request can arrive with its last handshake message."""
        out: list[bytes] = []
        while True:
            try:
                chunk = self.tls.read(_READ)
            except ssl.SSLWantReadError:
                return b"".join(out), False
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b"".join(out), True
            if not chunk:
                return b"".join(out), True
            out.append(chunk)

    def send(self, data: bytes) -> None:
        if data:
            self.tls.write(data)
            self.flush()

    def close(self) -> None:
        try:
            self.tls.unwrap()
        except (ssl.SSLError, OSError):
            pass
        try:
            self.flush()
        except OSError:
            pass


def _bad_gateway(agent: _Side, why: str) -> None:
    body = f"claude-sandbox: the credential broker could not reach the host: {why}\n".encode()
    agent.send(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def serve(broker: Broker, conn: _socket.socket, upstream: _socket.socket, name: str,
          first: bytes, entry: dict[str, object], idle: float | None = None) -> tuple[int, int]:
    """Terminate, inject, relay until either side ends; (bytes sent, bytes received) in
    the clear. `entry` (the record's) gains what was injected and seen."""
    for sock in (conn, upstream):
        # Each TLS record goes out at once: Nagle's wait for an ACK would hold a
        # handshake's last flight or a short request for a delayed-ACK timer (40 ms).
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
    agent = _Side(conn, broker.server, True, None)
    try:
        agent.handshake(first)
    except (ssl.SSLError, OSError) as exc:
        entry["rule"] = f"{entry.get('rule')}; the agent's TLS ended: {exc}"
        return 0, 0
    host = _Side(upstream, broker.client, False, name)
    try:
        host.handshake()
    except (ssl.SSLError, OSError) as exc:
        entry["rule"] = f"{entry.get('rule')}; the host's TLS failed: {exc}"
        _bad_gateway(agent, str(exc))
        agent.close()
        return 0, 0
    pairs = broker.by_host[name]
    requests = Requests(pairs, tuple(s for s in broker.sentinels if s not in pairs),
                        name.encode())
    sent = received = 0
    poller = select.poll()
    for sock in (conn, upstream):
        poller.register(sock.fileno(), select.POLLIN)
    try:
        early, ended = agent.buffered()  # what came with the handshake's last message
        out = requests.feed(early)
        sent += len(out)
        host.send(out)
        while not ended:
            ready = poller.poll(None if idle is None else int(idle * 1000))
            if not ready:
                break
            for fd, _ in ready:
                if fd == conn.fileno():
                    data, ended_here = agent.receive()
                    out = requests.feed(data)
                    sent += len(out)
                    host.send(out)
                else:
                    data, ended_here = host.receive()
                    received += len(data)
                    agent.send(data)
                    if requests.state == "await":  # a WebSocket asked: held till a 101
                        held = requests.answered(data) or b""
                        sent += len(held)
                        host.send(held)
                ended = ended or ended_here
    except Malformed as bad:
        entry["rule"] = f"{entry.get('rule')}; ended: {bad}"
    except (ssl.SSLError, OSError):
        pass
    finally:
        entry.update(terminated=True, injected=requests.injected)
        if requests.elsewhere:
            entry["other_sentinels"] = requests.elsewhere
    agent.close()
    host.close()
    return sent, received
