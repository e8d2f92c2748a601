"""The jail's holder, forked: the launcher's side (`spawn_holder`) and the child's
(`forked`), which makes the namespaces and then serves (holder.py).

A fork, not a new interpreter: the launcher's is running already, and an interpreter's
start cost every jailed launch about 10 ms of CPU while pasta attached and the launcher
planned on the same cores (docs/adr/0004-launch-cost.md). What an exec would have
cleared, the child clears (docs/explanation/egress-jail.md).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum
import _socket
import fcntl
import gc
import os
import stat
import sys

from claude_sandbox.core import kernel, streams, wire
from claude_sandbox.core.errors import EXIT_UNAVAILABLE
from claude_sandbox.core.libc import load_libc
from claude_sandbox.core.process import Child, close_all_but, join_cgroups
from claude_sandbox.core.views import own_namespaces
from claude_sandbox.jail.holder import NAME, serve

TAP_NAME = "eth0"  # the jail's interface, which pasta attaches to (-I)
_TUNSETIFF = 0x400454CA
_TUNSETPERSIST = 0x400454CB
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000
_NETLINK_ROUTE = 0


def spawn_holder(cgroup_dirs: tuple[str, ...] = ()) -> tuple[Child, _socket.socket]:
    """Fork the jail's holder (`forked`), which makes its own user, network and mount
    namespaces; the launcher's end of their channel.

    The socketpair is the only channel (never a pipe: egress-jail.md). The holder keeps
    its end and the three standard streams only. `cgroup_dirs`: the launch's cgroup, which
    the holder joins itself once its namespaces exist, so that the egress proxy and the
    session, its children, inherit the caps.
    """
    load_libc()  # here, once: the child's unshare needs it
    streams.flush()  # or the child's first line would carry what the launcher's held
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        pid = os.fork()
    except BaseException:
        ours.close()
        theirs.close()
        raise
    if pid == 0:
        status = 1
        try:
            status = forked(theirs, cgroup_dirs)
        finally:
            os._exit(status)
    theirs.close()
    return Child(pid), ours


def _standard_streams_as_exec_leaves_them(channel: int) -> None:
    """/dev/null over a standard stream's number where the launcher had one of its own
    there, close-on-exec (it started with that stream closed, and the number went to the
    next thing it opened): an exec would have closed it, and the holder, its tools and
    the session must not hold what the launcher holds, least of all the launcher's end
    of this channel, whose end of file tells the holder that the launcher is gone."""
    for fd in (0, 1, 2):
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            continue  # closed: as the launcher had it
        if fd != channel and flags & fcntl.FD_CLOEXEC:
            streams.null_at(fd)


def is_tun(info: os.stat_result) -> bool:
    """Whether /dev/net/tun's node is the tun device (10:200): a bind of /dev/null or of a
    file over it opens fine but is no tun."""
    return stat.S_ISCHR(info.st_mode) and (os.major(info.st_rdev),
                                           os.minor(info.st_rdev)) == (10, 200)


def make_tap() -> _socket.socket:
    """Create the jail's tap device, persistent, before pasta attaches to it, and return
    a routing socket (NETLINK_ROUTE) of the jail's namespace, through which the launcher
    locks the routes (lock.py). In the holder, in its new namespaces.

    When pasta creates the device itself, closing it on pasta's exit unregisters it, and
    the kernel waits there for every pending RCU callback (rcu_barrier): a killed pasta
    stayed in exit() for 25-40 ms, and teardown waits for it so that no process outlives
    the launch. A persistent device is not unregistered on close; it goes with the
    namespace, in the kernel's own cleanup work, once nothing holds the namespace. Only a
    process with CAP_NET_ADMIN over the namespace can attach to it: pasta (it joins this
    user namespace), never the sandbox (bwrap drops every capability, and the sandbox's
    /dev has no net/tun). The descriptor is closed here, so that pasta can attach.

    A socket belongs to the namespace it was made in. The kernel lets the launcher change
    routes through this one because its maker held CAP_NET_ADMIN here, and the launcher,
    the owner of this user namespace, has every capability in it.
    """
    # struct ifreq: the name (16 bytes), then the flags (a short); 40 bytes in all.
    flags = (_IFF_TAP | _IFF_NO_PI).to_bytes(2, "little")
    ifreq = (TAP_NAME.encode().ljust(16, b"\0") + flags).ljust(40, b"\0")
    try:
        tun = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
        try:
            # The launcher's preflight says so first, but it runs beside this: no other
            # device mounted there is ever sent the tun device's requests.
            if not is_tun(os.fstat(tun)):
                raise OSError("/dev/net/tun is not the tun device (10:200)")
            fcntl.ioctl(tun, _TUNSETIFF, ifreq)
            fcntl.ioctl(tun, _TUNSETPERSIST, 1)
        finally:
            os.close(tun)
    except OSError as exc:
        raise OSError(f"cannot create the tap device: {exc.strerror or exc}") from None
    try:
        return _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, _NETLINK_ROUTE)
    except OSError as exc:
        raise OSError(f"cannot open a routing socket in the jail's namespace: "
                      f"{exc.strerror or exc}") from None


def forked(sock: _socket.socket, cgroup_dirs: tuple[str, ...]) -> int:
    """The holder's life, in the launcher's forked child (`spawn_holder`): make the
    namespaces, say so, join the launch's cgroup, serve. The caller _exits with the
    status; nothing here returns into the launcher's code. What an exec would have
    cleared is cleared here: every descriptor but the channel and the three standard
    streams (the janitor must see the launcher's end of its pipe close, and no tool, relay
    or proxy may hold what the launcher holds), and every signal handler the launcher set.
    """
    # The launcher's objects are never collected here: a socket or file the launcher
    # dropped would otherwise close, by number, a descriptor this process opened since.
    gc.freeze()
    for signum in _signal.valid_signals():
        if callable(_signal.getsignal(signum)):
            _signal.signal(signum, _signal.SIG_DFL)
    # Ctrl-C during set-up reaches this process too (it keeps the terminal's foreground
    # group), which the launcher ignores: die quietly, as the launcher's own choice.
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    close_all_but({0, 1, 2, sock.fileno()})
    _standard_streams_as_exec_leaves_them(sock.fileno())
    # unshare --user --map-root-user --net --mount: root inside is the launching user.
    ids = (os.getuid(), os.getgid())
    why = own_namespaces(kernel.CLONE_NEWNET, (0, 0), ids)
    if why is not None:
        wire.send(sock, ["err", why])
        return 1
    # Its name in ps and in /proc/PID/comm; its command line is the launcher's.
    load_libc().prctl(kernel.PR_SET_NAME, NAME.encode(), 0, 0, 0)
    try:
        routing = make_tap()
    except OSError as exc:
        wire.send(sock, ["tap", str(exc)])
        return 1
    # "up" says the namespaces and the device exist, and hands the launcher the socket.
    wire.send(sock, ["up"], [routing.fileno()])
    routing.close()
    if cgroup_dirs:
        # Into the launch's cgroup before anything is served: every tool, the egress
        # proxy and the session are this process's children, and inherit its caps. After
        # the namespaces: a move between cgroups waits for an RCU grace period (15-20 ms
        # measured), which then passes while pasta attaches and the launcher plans.
        why = join_cgroups(cgroup_dirs)
        if why is not None:
            print(why, file=sys.stderr)
            return EXIT_UNAVAILABLE
    try:
        return serve(sock)
    except (BrokenPipeError, ConnectionResetError):
        # The parent went away mid-request (a SIGKILLed launcher): nothing to
        # hold, and nobody to tell; no traceback on the user's terminal.
        return 1
