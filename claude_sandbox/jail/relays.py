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
import time

from claude_sandbox.core.process import Child, fork_exec
from claude_sandbox.core.record import record
from claude_sandbox.jail.holder import listening  # one reading of /proc/net/tcp for both sides
from claude_sandbox.jail.start import TOOL_ENV

READY_TIMEOUT = 3.0


@record
class Relay:
    """One configured port and the two socat command lines that carry it."""

    kind: str  # "local" or "callback"
    port: int
    path: str  # the unix socket in the private directory

    def outside_argv(self, socat: str) -> list[str]:
        if self.kind == "local":
            return [socat, f"UNIX-LISTEN:{self.path},fork", f"TCP4:127.0.0.1:{self.port}"]
        return [
            socat,
            f"TCP4-LISTEN:{self.port},bind=127.0.0.1,reuseaddr,fork",
            f"UNIX-CONNECT:{self.path}",
        ]

    def inside_argv(self, socat: str, setpriv: str) -> list[str]:
        # The holder starts it, and later becomes bwrap (--die-with-parent):
        # setpriv's parent-death signal ends the relay with it, even when the
        # launcher was SIGKILLed and nothing of ours runs to tear down.
        death = [setpriv, "--pdeathsig", "KILL", "--"]
        if self.kind == "local":
            return [
                *death,
                socat,
                f"TCP4-LISTEN:{self.port},bind=127.0.0.1,reuseaddr,fork",
                f"UNIX-CONNECT:{self.path}",
            ]
        return [*death, socat, f"UNIX-LISTEN:{self.path},fork", f"TCP4:127.0.0.1:{self.port}"]

    def inside_listener(self) -> tuple[str, str]:
        """What the inside socat listens on, for the holder's readiness check."""
        if self.kind == "local":
            return ("tcp", str(self.port))
        return ("unix", self.path)

    def outside_listener(self) -> tuple[str, str]:
        if self.kind == "local":
            return ("unix", self.path)
        return ("tcp", str(self.port))


def plan_relays(
    local_ports: tuple[int, ...], callback_ports: tuple[int, ...], directory: str
) -> tuple[Relay, ...]:
    return tuple(
        [Relay("local", p, os.path.join(directory, f"l-{p}")) for p in local_ports]
        + [Relay("callback", p, os.path.join(directory, f"c-{p}")) for p in callback_ports]
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


def spawn_outside(relay: Relay, socat: str) -> Child:
    null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    try:
        streams = {0: null, 1: null, 2: null}
        return fork_exec(relay.outside_argv(socat), TOOL_ENV, streams, True, die_with_parent=True)
    finally:
        os.close(null)


def wait_ready(relay: Relay, proc: Child) -> bool:
    """Wait until the outside socat listens; False if it died or never did."""
    kind, where = relay.outside_listener()
    deadline = time.monotonic() + READY_TIMEOUT
    while not listening(kind, where):
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True
