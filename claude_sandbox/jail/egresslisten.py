"""The egress proxy's sockets in the jail's namespace: its TCP listener and its
resolver's UDP and TCP sockets, on 127.0.0.1, bound before the agent exists (netfilter.py
redirects the agent's TCP and DNS to them)."""

from __future__ import annotations

import _socket
import errno

from claude_sandbox.jail import netfilter


def listeners() -> tuple[_socket.socket, _socket.socket, _socket.socket]:
    """The proxy's TCP listener and the resolver's UDP and TCP sockets, on 127.0.0.1.

    The loopback comes up first: the proxy starts before pasta has configured the
    namespace, and a UDP socket bound to 127.0.0.1 while `lo` is down keeps no source
    address of its own. Its answers then left from whatever address the route chose,
    the redirected query's translation did not apply to them, and the agent's resolver
    dropped every one (measured: one launch in five, all its lookups failed)."""
    loopback_up()
    made = []
    try:
        for kind, port in ((_socket.SOCK_STREAM, netfilter.PROXY_PORT),
                           (_socket.SOCK_DGRAM, netfilter.RESOLVER_PORT),
                           (_socket.SOCK_STREAM, netfilter.RESOLVER_PORT)):
            sock = _socket.socket(_socket.AF_INET, kind | _socket.SOCK_CLOEXEC)
            made.append(sock)
            _bind(sock, port)
            if kind == _socket.SOCK_STREAM:
                sock.listen(1024)
    except OSError:
        for sock in made:
            sock.close()
        raise
    return made[0], made[1], made[2]


_BIND_TRIES = 200  # 5 ms apart: a second at most, for the kernel to finish lo's start


def _bind(sock: _socket.socket, port: int) -> None:
    """Bind 127.0.0.1:`port`, waiting out the instant in which lo is up but not yet
    addressed (loopback_up); any other error, or a second of it, is the caller's."""
    import time

    for _ in range(_BIND_TRIES - 1):
        try:
            sock.bind(("127.0.0.1", port))
            return
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
        time.sleep(0.005)
    sock.bind(("127.0.0.1", port))


_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """`ip link set lo up`, by ioctl: the proxy holds CAP_NET_ADMIN over the namespace.

    Always set, even when the flags read say up: pasta brings lo up at the same time,
    and the flags show IFF_UP before the kernel has given lo its 127.0.0.1 (a bind then
    fails with EADDRNOTAVAIL: seen once in about a thousand launches). Setting the
    flags waits for the routing lock that pasta's bring-up holds until lo is addressed;
    `_bind` waits out what is left."""
    import fcntl

    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM | _socket.SOCK_CLOEXEC)
    try:
        request = bytearray(b"lo".ljust(16, b"\0") + bytes(24))  # struct ifreq
        fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request)
        flags = int.from_bytes(request[16:18], "little")
        request[16:18] = (flags | _IFF_UP).to_bytes(2, "little")
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, request)
    finally:
        sock.close()
