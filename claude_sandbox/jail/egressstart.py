"""The egress proxy's start: its listeners bound, its policy checked, its answer to the
launcher; the rest of it (egressproxy.py and the handlers it imports) is loaded when the
first connection or query arrives.

The holder forks the proxy (holder.start_proxy) and runs `main` in the child. What can
refuse a launch is done before the proxy says it serves: the listeners bound (what the
packet filter redirects then waits in their queues), the policy parsed, the credential
broker's certificate loaded, the upstream proxy's encoding read. What is loaded later
only serves: a session that opens no connection (`claude-sandbox shell -- make`) never
pays for it, and one that does pays once, while its first connection waits in the
listener's queue (docs/adr/0004-launch-cost.md). A proxy that cannot load it ends, and
with it every listener: the agent's connections are refused, never let out.
"""

from __future__ import annotations

import _socket
import gc
import os
import select

from claude_sandbox.core import wire
from claude_sandbox.jail import egresslisten, egresspolicy
from claude_sandbox.jail.holder import LIMIT
from claude_sandbox.jail.reaping import set_not_dumpable

_SOCKET = 0o140000  # S_IFSOCK (`stat` is not imported for two constants)
_REGULAR = 0o100000  # S_IFREG


def main(control_fd: int) -> int:
    """The proxy's life, in the holder's forked child: listen, take the policy, and serve
    once there is something to serve."""
    # The launch set up with the collector off (__main__.py), and this process serves
    # for the whole session: it collects again, but never what it inherited, which a
    # pass here would free, closing by number a descriptor this process opened since.
    gc.freeze()
    gc.enable()
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    set_not_dumpable()  # other processes of this user outside cannot read it either
    control = _socket.socket(fileno=control_fd)
    try:
        sockets = egresslisten.listeners()
    except OSError as exc:
        wire.send(control, ["err", f"the egress proxy cannot listen: {exc.strerror or exc}"])
        return 1
    try:
        message = wire.receive(control, LIMIT)
    except (OSError, wire.WireError):
        return 1  # the launcher went away mid-message: nothing to serve
    if message is None:
        return 0
    op = message.fields[0] if message.fields else ""
    args, fds = list(message.fields[1:]), message.fds
    if op != "policy" or len(fds) != 2 or os.fstat(fds[1]).st_mode & 0o170000 != _SOCKET:
        wire.send(control, ["err", "the egress proxy needs its policy, its record and the "
                            "host's routing table"])
        return 1
    try:
        size = egresspolicy.size(int(args[2]))  # the policy's fields; the broker's follow
        policy = egresspolicy.Policy.from_fields(args[:size])
        if policy.upstream:
            from claude_sandbox.jail.upstreamproxy import Upstream

            Upstream.decode(policy.upstream)
        broker = None
        if args[size:]:
            from claude_sandbox.jail import egressinject  # ssl: only when brokering

            broker = egressinject.from_fields(args[size:])
    except (ValueError, IndexError, TypeError) as exc:
        wire.send(control, ["err", f"the egress proxy's policy does not parse: {exc}"])
        return 1
    except OSError as exc:  # ssl.SSLError included: the certificate or the trust store
        wire.send(control, ["err", f"the credential broker cannot start: {exc}"])
        return 1
    # Read before the agent runs, as the policy is: the names it holds are the launch's.
    hosts = hosts_text(policy.hosts_file)
    wire.send(control, ["ok"])
    if not first_use(control, sockets):
        return 0  # the session ended having asked for nothing: nothing to record
    try:
        from claude_sandbox.jail import egressproxy

        egressproxy.start(policy, hosts, fds[0], fds[1], broker, control, sockets)
    except Exception as exc:
        # Its listeners go with it: the agent's connections are refused from here on, and
        # the launcher says why at the session's end (session.Jail.stop).
        try:
            wire.send(control, ["err", f"the egress proxy failed during the session "
                                f"({type(exc).__name__}: {exc}); the agent's connections "
                                "were refused from then on"])
        except OSError:
            pass  # the launcher is gone: nobody to tell
        return 1
    return 0


def hosts_text(path: str) -> str:
    """A hosts file's text (its first MiB), or "" where it is no regular file or cannot
    be read: the names the proxy answers first (egressdns.parse_hosts). It is read before
    the proxy says it serves, so the launch waits for it: a FIFO or a device there is
    never waited on nor read (a link is followed: a container's /etc/hosts may be one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if os.fstat(fd).st_mode & 0o170000 != _REGULAR:
            return ""
        return os.read(fd, 1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def first_use(control: _socket.socket,
              sockets: tuple[_socket.socket, _socket.socket, _socket.socket]) -> bool:
    """Wait until a listener has a connection or a query (True), or the control socket
    closes, the session having ended (False). A listener in error ends the proxy, as in
    egressproxy.serve: without it nothing gets out."""
    poller = select.poll()
    for sock in (control, *sockets):
        poller.register(sock.fileno(), select.POLLIN)
    while True:
        for fd, events in poller.poll():
            if events & (select.POLLNVAL | select.POLLERR):
                return False
            if fd != control.fileno():
                return True
            if not control.recv(1):
                return False
