"""The jail holder: the first process of the jail's user + network namespace.

The launcher forks it, and the child makes the namespaces itself, as `unshare --user
--map-root-user --net --mount` would (holderfork.py; docs/explanation/egress-jail.md).
It holds the namespace open while pasta attaches from outside, then carries out the
parent's requests inside the namespace: write the packet filter (or start its tool and
answer for it later), switch IPv6 off, fork the egress proxy, start an inside relay, mount the
workspace's overlays in its own mount namespace (core/views.py), and finally exec the
session command. Policy (which routes and filter, whether the
read-back matches) lives in the parent (session.py, lock.py, readback.py,
netfilter.py); the holder is a small executor.

It talks to the parent only over the socketpair end it inherits,
never a pipe or a file: a pipe can be reopened through /proc/PID/fd by any
process of the same user, a socketpair cannot (egress-jail.md, Channels). The session's argv
and environment arrive on that socket, never on a command line
(/proc/PID/cmdline is world-readable).

Imports are deliberately minimal (`_socket` and `_signal` rather than
`socket` and `signal`): the launcher imports this module before the holder's fork, and
on our machines their enum set-up alone costs several milliseconds of a ~40 ms
launch budget. Messages are core/wire.py's, as every crossing between our
processes.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import _socket
import os
import time

from claude_sandbox.core import kernel, wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from claude_sandbox.core.process import Child
    from claude_sandbox.core.wire import Message

ENCODING = "utf-8"
ERRORS = "surrogateescape"  # argv and environment are bytes on Linux
# Signals Python leaves ignored (SIGPIPE, SIGXFSZ); an ignored disposition
# survives exec, and an agent must not inherit it.
_PYTHON_IGNORED = (_signal.SIGPIPE, _signal.SIGXFSZ)
_TOOL_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
RELAY_READY_TIMEOUT = 3.0  # for either side's socat
# The holder's name (/proc/PID/comm): a fork of the launcher, its command line is the
# launcher's. The egress proxy, its fork, is named as it is forked (start_proxy).
NAME = "csbx-holder"
PROXY_NAME = "csbx-egress"


# The largest message the launcher sends: the session's argv and environment, which the
# kernel itself bounds (ARG_MAX, a quarter of the stack limit) far below this.
LIMIT = 1 << 24


def next_request(sock: _socket.socket) -> Message | None:
    """The launcher's next message; None when it went away, mid-message or not."""
    try:
        return wire.receive(sock, LIMIT)
    except (wire.WireError, OSError):
        return None


def _read_all(sock: _socket.socket) -> str:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks).decode(ENCODING, "replace")


def _spawn(argv: list[str], streams: dict[int, int], setsid: bool) -> Child:
    from claude_sandbox.core.spawn import spawn_tool

    return spawn_tool(argv, _TOOL_ENV, streams, setsid)


class Started:
    """A tool running, its output not read yet: `start` made it, `finish` reads it."""

    def __init__(self, tool: Child, stdout: _socket.socket, stderr: _socket.socket) -> None:
        self.tool, self.stdout, self.stderr = tool, stdout, stderr


def start_tool(stdin_text: str, argv: list[str]) -> Started | list[str]:
    """Start `argv` with stdin/stdout/stderr on socketpairs and give it its input; the
    error reply when it cannot run."""
    pairs = [_socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM) for _ in range(3)]
    try:
        tool = _spawn(argv, {n: p[1].fileno() for n, p in enumerate(pairs)}, setsid=False)
    except OSError as exc:
        for a, b in pairs:
            a.close()
            b.close()
        return ["err", f"cannot run {argv[0]}: {exc.strerror}"]
    for _, child_end in pairs:
        child_end.close()
    stdin, stdout, stderr = (p[0] for p in pairs)
    # The input is a short script: it fits the socket buffer, so
    # writing it all before reading cannot deadlock. A tool may end without reading
    # it: its exit status and output are its answer, and the holder must not die of
    # the broken pipe.
    try:
        stdin.sendall(stdin_text.encode(ENCODING, ERRORS))
    except BrokenPipeError:
        pass
    stdin.close()
    return Started(tool, stdout, stderr)


def finish_tool(started: Started) -> list[str]:
    """Wait for a started tool; ok, its status, out and err. Its output is a few
    kilobytes at most (iptables-save's), which the socket buffers hold while it waits
    to be read."""
    out = _read_all(started.stdout)
    err = _read_all(started.stderr)
    # A tool's output is text; a NUL in it would not pass as a field.
    return ["ok", str(started.tool.wait()), out.replace("\0", ""), err.replace("\0", "")]


def ipv6_off() -> list[str]:
    """Switch IPv6 off in this namespace; the read-back decides if it held."""
    failures = []
    for conf in ("all", "default", "lo"):
        try:
            with open(f"/proc/sys/net/ipv6/conf/{conf}/disable_ipv6", "w") as f:
                f.write("1")
        except OSError as exc:
            failures.append(f"{conf}: {exc.strerror}")
    return ["ok", "; ".join(failures)]


def listening(kind: str, where: str) -> bool:
    """Whether this namespace has a listener on the unix path or 127.0.0.1:port."""
    if kind == "unix":
        # A path socket exists once socat has bound it; listen() follows at once.
        return os.path.exists(where)
    # /proc/net/tcp is this namespace's table: 127.0.0.1:PORT in LISTEN (0A).
    want = f"0100007F:{int(where):04X}"
    with open("/proc/net/tcp") as f:
        return any(
            fields[1] == want and fields[3] == "0A"
            for fields in (line.split() for line in f)
            if len(fields) > 3
        )


def wait_listening(kind: str, where: str, proc: Child) -> bool:
    """Wait until there is a listener (see listening); False if `proc` died or never did."""
    deadline = time.monotonic() + RELAY_READY_TIMEOUT
    while not listening(kind, where):
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def start_relay(kind: str, where: str, argv: list[str]) -> list[str]:
    """Start an inside socat, in its own session, off the terminal (relays.py says
    why); wait until it listens."""
    null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    try:
        relay = _spawn(argv, {0: null, 1: null, 2: null}, setsid=True)
    except OSError as exc:
        return ["err", f"cannot run {argv[0]}: {exc.strerror}"]
    finally:
        os.close(null)
    if not wait_listening(kind, where, relay):
        relay.kill()  # unless it has exited already (and been reaped)
        relay.wait()
        return ["err", f"relay on {where} did not start"]
    return ["ok", str(relay.pid)]


def start_proxy(sock: _socket.socket, control: int, started: Started | None) -> list[str]:
    """Fork the egress proxy (jail/egressstart.py) with its end of the launcher's control
    socket: in this namespace, outside the pid namespace bwrap makes for the session.

    A fork, not a new interpreter: this one is running already, and the proxy's
    start then costs the launch no interpreter start. The child keeps nothing of
    the holder's: the holder's channel and a started tool's output are closed at
    once (the launcher reads the channel's EOF as the session's exec), and every
    stream is /dev/null.
    """
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            # Named at once: a launcher that must sweep up after a holder that died here
            # knows it by this name (reaping.kill_namespace). libc is loaded already.
            from claude_sandbox.core.libc import load_libc

            load_libc().prctl(kernel.PR_SET_NAME, PROXY_NAME.encode(), 0, 0, 0)
            os.setsid()  # its own group, off the terminal, whose signals are the agent's
            sock.close()
            if started is not None:
                started.stdout.close()
                started.stderr.close()
            from claude_sandbox.jail import egressstart

            status = egressstart.main(control)
        except BaseException as exc:  # its streams are /dev/null: the launcher's line says it
            try:
                wire.send(_socket.socket(fileno=control),
                          ["err", f"the egress proxy failed: {type(exc).__name__}: {exc}"])
            except BaseException:  # nothing is left to tell it with
                pass
        finally:
            os._exit(status)
    os.close(control)
    return ["ok", str(pid)]


def _place_fds(sock: _socket.socket, received: list[int], targets: list[int]) -> _socket.socket:
    """Put each received descriptor at the number the session expects.

    First lift everything (our socket included) above any target, so that no
    placement closes a descriptor still to be placed or the channel itself.
    """
    import fcntl

    floor = max(targets, default=0) + 1
    lifted = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in received]
    for fd in received:
        os.close(fd)
    if sock.fileno() in targets:
        moved = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, floor)
        sock.close()
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, moved)
    for src, dst in zip(lifted, targets, strict=True):
        os.dup2(src, dst, inheritable=True)
        os.close(src)
    return sock


def exec_session(sock: _socket.socket, argv: list[str], env: list[str]) -> None:
    """Become the session: same pid, same terminal, same foreground group.

    The socket is close-on-exec, so the parent sees EOF exactly when the exec
    succeeded; on failure it receives the reason instead.
    """
    environ = dict(item.split("=", 1) for item in env if "=" in item)
    for signum in _PYTHON_IGNORED:
        _signal.signal(signum, _signal.SIG_DFL)
    # bwrap stays in the terminal's foreground group with the agent: it must not
    # die of the agent's Ctrl-C or hang-up, or --die-with-parent ends the whole
    # sandbox before the agent has had its say (process.SESSION_IGNORED).
    from claude_sandbox.core.process import ignore_session_signals, tie_to_parent

    ignore_session_signals()
    # The session dies with the launcher, even a SIGKILLed one.
    if not tie_to_parent(os.getppid()):
        wire.send(sock, ["err", "cannot tie the session to the launcher (PR_SET_PDEATHSIG)"])
        os._exit(127)
    try:
        os.execve(argv[0], argv, environ)
    except OSError as exc:
        wire.send(sock, ["err", f"cannot run {argv[0]}: {exc.strerror}"])
        os._exit(127)


def _attach_views(args: list[str], fds: list[int]) -> list[str]:
    from claude_sandbox.core import viewplaces

    failed = viewplaces.attach_all(viewplaces.from_request(args), fds)
    return ["ok"] if failed is None else ["err", failed]


def serve(sock: _socket.socket) -> int:
    # `start` runs a tool while the holder goes on serving, and `finish` answers for it:
    # the packet filter's nf_tables commit waits in the kernel (an RCU grace period,
    # about 30 ms), which the route lock overlaps instead of queueing behind it.
    started: Started | None = None
    while (message := next_request(sock)) is not None:
        fds = list(message.fds)
        op, args = (message.fields or ("",))[0], list(message.fields[1:])
        if op == "proxy" and len(fds) == 1:
            wire.send(sock, start_proxy(sock, fds[0], started))
            continue
        if op == "views":  # a root launch's, in this holder's mount namespace (ADR 0020)
            wire.send(sock, _attach_views(args, fds))
            wire.close(fds)
            continue
        if op != "exec":
            wire.close(fds)
        if op == "filter" and started is None and len(args) > 6:
            # The packet filter: through x_tables where the kernel has them, and else the
            # nf_tables tools the request carries, started as `start` would (netfilter.py).
            from claude_sandbox.jail import iptables

            try:
                tables = [(args[i], bytes.fromhex(args[i + 1]), bytes.fromhex(args[i + 2]))
                          for i in (0, 3)]
            except ValueError:
                wire.send(sock, ["err", "the packet filter's tables do not parse"])
                continue
            written = iptables.write(tables)
            if written[0] != "err":  # written, or written and unreadable: no second back end
                wire.send(sock, ["written" if written[0] == "ok" else "unread", *written[1:]])
                continue
            args = args[6:]
            op = "start"
        if op == "start" and started is None:
            # The tool's pid: the launcher reaps it if the launch ends before `finish`
            # (the holder killed, the tool is the launcher's, its subreaper's, to reap).
            tool = start_tool(args[0], args[1:])
            if isinstance(tool, Started):
                started = tool
                wire.send(sock, ["ok", str(tool.tool.pid)])
            else:
                wire.send(sock, tool)  # it could not run: nothing to finish
        elif op == "finish" and started is not None:
            wire.send(sock, finish_tool(started))
            started = None
        elif op == "ipv6off":
            wire.send(sock, ipv6_off())
        elif op == "relay":
            wire.send(sock, start_relay(args[0], args[1], args[2:]))
        elif op == "overlay" and len(args) == 4:
            # In this holder's own mount namespace, which bwrap inherits (core/views.py).
            from claude_sandbox.core.views import mount_overlay

            failed = mount_overlay(*args)
            wire.send(sock, ["ok"] if failed is None else ["err", failed])
        elif op == "exec":
            # exec, argc, argv..., fd count, target fd numbers..., environment...
            argc = int(args[0])
            rest = args[1 + argc :]
            nfds = int(rest[0])
            targets = [int(t) for t in rest[1 : 1 + nfds]]
            if len(targets) != len(fds):
                wire.send(sock, ["err", "descriptors lost on the way to the jail"])
                return 1
            sock = _place_fds(sock, fds, targets)
            exec_session(sock, args[1 : 1 + argc], rest[1 + nfds :])
        else:
            wire.send(sock, ["err", f"unknown request {op!r}"])
    # The parent went away before the session started: nothing to hold.
    return 1
