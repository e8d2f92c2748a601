"""Loopback relays across the jail's wall: `local-port` and `callback-port`.

The jail has its own 127.0.0.1, so an agent cannot reach the container's
local services, and a browser outside cannot reach an OAuth callback
listener inside. Each configured port gets a pair of socat processes joined
by a unix socket in the launch's private 0700 directory; a unix path socket
crosses network namespaces, and the directory's mode keeps other users off it.

    local-port N:    jail 127.0.0.1:N -> socat -> DIR/l-N -> socat -> container 127.0.0.1:N
    callback-port N: container 127.0.0.1:N -> socat -> DIR/c-N -> socat -> jail 127.0.0.1:N

Each relay grants service access the jail otherwise denies, so relays exist
only for ports the operator configured (docs/explanation/egress-jail.md,
Relays). Relays run in their own session with /dev/null as standard
streams: a terminal's Ctrl-C must reach the agent, not a relay, and no relay
may read or write the user's terminal (docs/explanation/egress-jail.md).
"""

from __future__ import annotations

import _socket
import errno
import os

from claude_sandbox.core.process import Child
from claude_sandbox.core.record import record
from claude_sandbox.core.spawn import spawn_tied
from claude_sandbox.jail.spec import JailSpec
from claude_sandbox.jail.start import TOOL_ENV


@record
class Relay:
    """One configured port and the two socat command lines that carry it."""

    kind: str  # "local" or "callback"
    port: int
    path: str  # the unix socket in the private directory

    def _tcp_side(self, inside: bool) -> bool:
        """Whether this side's socat listens on 127.0.0.1 (else on the unix socket)."""
        return inside == (self.kind == "local")

    def argv(self, socat: str, inside: bool) -> list[str]:
        if self._tcp_side(inside):
            return [
                socat,
                f"TCP4-LISTEN:{self.port},bind=127.0.0.1,reuseaddr,fork",
                f"UNIX-CONNECT:{self.path}",
            ]
        return [socat, f"UNIX-LISTEN:{self.path},fork", f"TCP4:127.0.0.1:{self.port}"]

    def inside_argv(self, socat: str, setpriv: str) -> list[str]:
        # The holder starts it, and later becomes bwrap (--die-with-parent):
        # setpriv's parent-death signal ends the relay with it, even when the
        # launcher was SIGKILLed and nothing of ours runs to tear down.
        return [setpriv, "--pdeathsig", "KILL", "--", *self.argv(socat, inside=True)]

    def listener(self, inside: bool) -> tuple[str, str]:
        """What one side's socat listens on, for holder.listening."""
        return ("tcp", str(self.port)) if self._tcp_side(inside) else ("unix", self.path)


def plan_relays(settings: JailSpec, directory: str) -> tuple[Relay, ...]:
    return tuple(
        [Relay("local", p, os.path.join(directory, f"l-{p}")) for p in settings.local_ports]
        + [Relay("callback", p, os.path.join(directory, f"c-{p}")) for p in settings.callback_ports]
    )


def port_taken(port: int) -> bool:
    """Whether the container's 127.0.0.1:port is already bound by someone else."""
    probe = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        # The same option socat's `reuseaddr` sets, so a TIME_WAIT socket
        # does not count as taken.
        probe.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return True
        raise
    finally:
        probe.close()
    return False


def spawn_outside(relay: Relay, socat: str, cgroup_dirs: tuple[str, ...] = ()) -> Child:
    """`cgroup_dirs`: joined before its exec (the launch's cgroup: socat forks one child a
    connection the agent opens, and those count against the agent's caps)."""
    null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    try:
        argv = relay.argv(socat, inside=False)
        return spawn_tied(argv, TOOL_ENV, {0: null, 1: null, 2: null}, cgroup_dirs)
    finally:
        os.close(null)
