"""A plain HTTP connection the egress proxy allowed by its Host, framed request by request.

The proxy judges a plain HTTP connection by the Host of its first request
(egressproxy.py) and connects to that name's own addresses. But the server there is
often a CDN's front end, which routes each request by its own Host: a second request on
the same kept-alive connection, for a site the agent runs on the same CDN, would reach
it. So the client's side is framed as a terminated connection's is (httpinject.py),
with nothing to put back: every request must name the judged host and the port
connected to, carry no routing header, and frame one way only; anything else ends the
connection. The server's side passes as it comes.
"""

from __future__ import annotations

import _socket
import select

from claude_sandbox.jail.httpinject import Malformed, Requests

_READ = 64 << 10


def relay(client: _socket.socket, upstream: _socket.socket, first: bytes, name: str,
          port: int, entry: dict[str, object], idle: float | None = None) -> tuple[int, int]:
    """Relay until both sides end, or a request is not the judged host's; (bytes sent,
    bytes received). `first`: the request head read to judge the connection."""
    requests = Requests({}, (), name.encode(), port, b"http")
    for sock in (client, upstream):
        sock.settimeout(None)  # the first read's deadline is over: poll waits from here
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
    sent = received = 0
    poller = select.poll()
    live = {client.fileno(): client, upstream.fileno(): upstream}
    for fd in live:
        poller.register(fd, select.POLLIN)
    try:
        out = requests.feed(first)
        upstream.sendall(out)
        sent += len(out)
        while live:
            ready = poller.poll(None if idle is None else int(idle * 1000))
            if not ready:
                break
            for fd, _ in ready:
                side = live.get(fd)
                if side is None:
                    continue
                data = side.recv(_READ)
                if side is client:
                    out = requests.feed(data)
                    upstream.sendall(out)
                    sent += len(out)
                else:
                    client.sendall(data)
                    received += len(data)
                    if requests.state == "await":  # a WebSocket asked: held till a 101
                        held = requests.answered(data) or b""
                        upstream.sendall(held)
                        sent += len(held)
                if not data:  # that side is done sending: pass the half close on
                    poller.unregister(fd)
                    del live[fd]
                    (upstream if side is client else client).shutdown(_socket.SHUT_WR)
    except Malformed as bad:
        entry["rule"] = f"{entry.get('rule')}; ended: {bad}"
    except OSError:
        pass  # a side reset or went away: the connection is over
    return sent, received
