"""What a jailed launch does first, right after the preflight: everything up to pasta's attach.

The holder's namespace and pasta's attach are the longest wait of a jailed
launch (ADR 0004), so begin() starts them before anything else is imported
(this module needs only os, select, _signal, _socket, and _ctypes through core/libc.py, which
session.py needs as well); the launcher's facts and plan, and importing
session.py, overlap their work. Early.abandon() ends all of it when the launch
stops before the jail takes over.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum
import _socket
import os
import select
import time

from claude_sandbox.core import engine, paths, wire
from claude_sandbox.core.errors import (
    EXIT_JAIL,
    EXIT_UNAVAILABLE,
    SandboxError,
    jail_error,
    no_process,
)
from claude_sandbox.core.process import Child, Forward
from claude_sandbox.core.record import record
from claude_sandbox.core.spawn import spawn_tied
from claude_sandbox.core.trace import Trace
from claude_sandbox.jail import holder as jail_holder
from claude_sandbox.jail import netfilter, reaping
from claude_sandbox.jail.dirs import make_private_dir, remove_at_teardown
from claude_sandbox.jail.holderfork import TAP_NAME, spawn_holder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# Flags shared with bench/bench_jail.py's floor, so the two measure the same
# pasta. --no-map-gw: otherwise "the gateway" is the host's 127.0.0.1 (measured).
# -t/-u/-T/-U none: no port forwarding in either direction, which also
# halves pasta's attach time. -4: the jail has no IPv6 to configure.
# -I: attach to the persistent device the holder made (holderfork.make_tap).
# --no-netns-quit: its inotify watch serves only namespaces bound to a file,
# never a PID target, and releasing it (an SRCU grace period) kept a killed
# pasta in exit() for ~25 ms; teardown ends pasta (our child) by its pid anyway.
# --no-icmp: the jail's packet filter lets only marked TCP and DNS to the forwarder
# out (iptables.filter_rules), so pasta's echo handling would never see a packet; its
# set-up cost pasta's start about 2.5 ms of CPU and 1.7 ms of its attach (ADR 0004).
PASTA_FLAGS: tuple[str, ...] = (
    "--config-net",
    "-I", TAP_NAME,
    "--no-netns-quit",
    "--no-icmp",
    "--no-map-gw",
    "-4",
    "-t", "none", "-u", "none", "-T", "none", "-U", "none",
    "--dns-forward", paths.DNS_FORWARDER,
    "-q",
)  # fmt: skip
NETNS_TIMEOUT = 5.0
PASTA_TIMEOUT = 10.0
_FIRST_WORD_LIMIT = 1 << 12  # the holder's first message: "up", or why not
TOOL_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
_FORWARDED = (_signal.SIGTERM, _signal.SIGHUP)
# Ctrl-C and Ctrl-\ reach the terminal's whole group: the agent's, the launcher outlives them.
_TERMINAL = (_signal.SIGINT, _signal.SIGQUIT)
HOLDER_GRACE = 0.2  # how long a broken channel or a failed pasta waits for an ending holder


class Forwarder:
    """SIGTERM and SIGHUP handling from the holder's spawn to teardown.

    Before the session starts, forwarding ends the holder (its default
    disposition) and with it the launch; afterwards it reaches the session
    (process.Forward), whose end triggers teardown. Either way the launcher
    lives on to tear down: a launcher killed by the default action would
    leave pasta behind. restore() also gives back the terminal signals
    begin() ignored.
    """

    def __init__(self, holder: Child, ignored: dict[int, object]) -> None:
        self.holder = holder
        self.ignored = ignored
        self.forward = Forward(holder.pid, _FORWARDED)

    def session_started(self) -> None:
        """Ctrl-C and Ctrl-\\ from a supervisor now reach the agent too."""
        self.forward.handle(_TERMINAL)

    def restore(self) -> None:
        self.forward.close()
        for signum, handler in self.ignored.items():
            _signal.signal(signum, handler)

    def exited(self) -> bool:
        """Whether the holder has exited, waiting up to HOLDER_GRACE: an exiting holder
        closes its descriptors before waitpid can see it; its pidfd polls readable then."""
        return bool(select.select([self.forward.pidfd], [], [], HOLDER_GRACE)[0])

    def quiet_end(self) -> bool:
        """Whether the holder's end in set-up was the user's: a forwarded signal, or the
        terminal's Ctrl-C or Ctrl-\\ (its group's). Any other is said (holder_ended)."""
        code = self.holder.poll()
        return bool(self.forward.signalled) or (code is not None and -code in _TERMINAL)

    def check(self) -> None:
        """Refuse to go on once a forwarded signal has ended the holder."""
        signum = self.forward.signalled
        if signum and self.holder.poll() is not None:
            raise _stopped(signum)


def _stopped(signum: int) -> SandboxError:
    return jail_error(f"stopped by signal {signum} before the session started", 128 + signum)


def holder_ended(code: int, status: int) -> SandboxError:
    """The holder ended in set-up, not by the user (the OOM killer, another's kill)."""
    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    # A holder that exited by itself failed a step of the jail's (a fork its tools or the
    # egress proxy needed): the jail's status, not the holder's own number.
    return jail_error(f"the jail's holder ended before the session started ({how}); the "
                      "agent did not run", status if code < 0 else EXIT_JAIL)


def _ended(forward: Forwarder) -> SandboxError:
    """Why a launch stops whose holder ended in set-up: the user's signal, or holder_ended."""
    code = forward.holder.wait()
    quiet = forward.quiet_end() and code < 0
    return _stopped(-code) if quiet else holder_ended(code, forward.forward.status(code))


def wait_netns(holder: Child, sock: _socket.socket,
               forward: Forwarder) -> tuple[int, _socket.socket]:
    """Wait until the holder says its namespaces and the tap device exist; a descriptor
    of its user namespace (opened here, where a holder that is gone is waited out) and
    the routing socket of its network namespace it sent (holderfork.make_tap).

    pasta cannot attach before the holder has its own network namespace (setns EINVAL,
    measured with this pasta), before the id maps are written or before the device
    exists: the holder's first message says all are done, or why they could not be.
    """
    if not select.select([sock], [], [], NETNS_TIMEOUT)[0]:
        raise jail_error("the namespace holder did not start")
    try:
        message = wire.receive(sock, _FIRST_WORD_LIMIT)
    except (OSError, wire.WireError):
        message = None
    said = list(message.fields) if message is not None else None
    fds = list(message.fds) if message is not None else []
    if said == ["up"] and len(fds) == 1:
        routing = _socket.socket(fileno=fds[0])
        try:
            return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC), routing
        except OSError:
            routing.close()
            raise
    wire.close(fds)
    if said is not None and said[:1] == ["tap"] and len(said) == 2:
        raise jail_error(said[1])  # the tap device or the routing socket, and why
    if said is None or said[:1] != ["err"] or len(said) != 2:
        # Ended before a word: a signal (the user's, the OOM killer's), or a failure of
        # its own that it could not tell. One that sent something else is ended: its
        # status, never waited for unbounded.
        forward.check()
        holder.kill()
        raise _ended(forward)
    why = engine.blocker(engine.read(), failed=True)
    raise jail_error(f"cannot create a user and network namespace ({said[1]}; "
                     + (f"{why})" if why else "are unprivileged user namespaces allowed?)"),
                     EXIT_UNAVAILABLE)


def spawn_pasta(holder: Child, directory: str,
                cgroup_dirs: tuple[str, ...] = ()) -> Child:
    """Start pasta's attach to the holder, in the foreground, as our child.

    With -f pasta neither forks nor daemonises: it writes its pid file once
    the namespace is configured (the "attached" signal session.py waits for) and
    stays this process's child, which ends it by pid and reaps it. And since
    the kernel kills it when the launcher dies (spawn_tied), not even a
    SIGKILLed launcher leaves a pasta behind (a daemon would live on). Never
    on the terminal (docs/explanation/egress-jail.md): its streams are /dev/null and a log
    in `directory`. `cgroup_dirs`: joined before its exec (the launch's cgroup: pasta
    carries the agent's traffic, and its memory counts against the agent's cap).
    """
    pidfile = os.path.join(directory, "pasta.pid")
    argv = [paths.tool("pasta"), *PASTA_FLAGS, "-f", "-P", pidfile]
    if os.geteuid() == 0:
        # As root pasta switches to nobody, who may not enter our namespace.
        argv += ["--runas", f"{os.getuid()}:{os.getgid()}"]
    argv.append(str(holder.pid))
    log = os.open(
        os.path.join(directory, "pasta.log"),
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
        0o600,
    )
    null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return spawn_tied(argv, TOOL_ENV, {0: null, 1: log, 2: log}, cgroup_dirs)
    finally:
        os.close(log)
        os.close(null)


def wait_attached(directory: str, pasta: Child, forward: Forwarder) -> None:
    """Wait until pasta has configured the namespace: its pid file is written."""
    pidfile = os.path.join(directory, "pasta.pid")
    deadline = time.monotonic() + PASTA_TIMEOUT
    while True:
        with reaping.Ignoring(FileNotFoundError):
            if os.stat(pidfile).st_size > 0:
                break
        if pasta.poll() is not None:
            # An exiting holder lets go of its namespaces before waitpid sees the exit,
            # and pasta can fail on them then.
            if forward.exited():
                raise reaping.HolderGone  # a signal ended the launch while pasta attached
            raise jail_error(f"pasta failed: {_last_message(os.path.join(directory, 'pasta.log'))}")
        if time.monotonic() > deadline:
            raise jail_error("pasta did not attach in time")
        time.sleep(0.0005)
    # pasta -f writes its own pid: the process started here, which teardown
    # ends by that pid. Anything else in the file is not the pasta we know.
    try:
        with open(pidfile) as f:
            named = int(f.read().strip())
    except (OSError, ValueError):
        named = -1
    if named != pasta.pid:
        raise jail_error(f"pasta's pid file names {named}, not the pasta started ({pasta.pid})")


def _last_message(log: str) -> str:
    """pasta's last line in its log, for the refusal."""
    try:
        with open(log, errors="replace") as f:
            useful = [line.strip() for line in f if line.strip() and "syslog" not in line]
    except OSError:
        useful = []
    return useful[-1] if useful else "no message"


@record
class Early:
    """What begin() started, handed to jail.start()."""

    holder: Child
    sock: _socket.socket
    forward: Forwarder
    userns_fd: int
    directory: str
    pasta: Child
    proxy: _socket.socket  # the launcher's end of the egress proxy's control socket
    # The proxy's end, until Jail.run has the holder fork the proxy with it: a socketpair,
    # the proxy's only channel (like the holder's, it cannot be reopened through /proc).
    proxy_end: _socket.socket
    routing: _socket.socket  # a routing socket of the jail's namespace (wait_netns)
    trace: Trace  # CLAUDE_SANDBOX_TRACE: the jail's phases
    # The launch's cgroup, which each process started for the session joins before its
    # exec (the outside relays fork one child a connection the agent opens: capped too).
    cgroup_dirs: tuple[str, ...] = ()
    was_subreaper: bool = True  # before begin() made this process one: never clear that

    def abandon(self) -> None:
        """End what begin() started when the launch stops before the jail takes it over
        (a refusal while the facts or the plan are made): nothing of it outlives the launch."""
        self.proxy_end.close()
        self.routing.close()
        _end(self.sock, self.forward, (self.pasta, self.holder), (self.userns_fd,), self.directory,
             self.proxy, self.was_subreaper)


def _end(sock: _socket.socket, forward: Forwarder, children: tuple[Child | None, ...],
         fds: tuple[int, ...], directory: str, proxy: _socket.socket | None,
         was_subreaper: bool) -> None:
    sock.close()  # the holder reads EOF and exits, if it has not yet
    if proxy is not None:
        proxy.close()  # the proxy reads EOF and exits; the namespace's end ends it anyway
    for child in children:
        if child is not None:
            child.kill()
            child.wait()
    if fds and fds[0] >= 0:
        # The egress proxy (the holder's child, so not ours to wait for, unless orphaned)
        # and anything else the holder started: each lives in the holder's user namespace,
        # nothing else does.
        dying, orphans = reaping.kill_namespace(os.fstat(fds[0]), jail_holder.PROXY_NAME)
        reaping.wait_all(dying)
        reaping.reap(orphans)
    for fd in fds:
        if fd >= 0:
            os.close(fd)
    if directory:
        remove_at_teardown(directory)
    forward.restore()
    if not was_subreaper:  # what begin() made this process, and only that
        reaping.stop_being_subreaper()


def begin(trace: Trace, cgroup_dirs: tuple[str, ...] = (),
          check: Callable[[], None] | None = None) -> Early:
    """Spawn the holder, prepare its namespace and start pasta's attach. `cgroup_dirs`:
    the launch's cgroup, which the holder joins itself (spawn_holder), and pasta and the
    relays before their exec. `check`: the host's preflight, run while the holder makes
    its namespaces, before its answer is read: a refusal there is the launch's, told as
    it would have been before the holder started, and the holder is ended.

    On any failure everything started here is ended before the error leaves.
    """
    # Ignored before anything is spawned, so that pasta and the holder inherit it
    # (exec keeps SIG_IGN): a Ctrl-C during set-up must not kill pasta in the
    # launcher's group. The holder chooses its own (holderfork.forked); the inner stage gives
    # the agent the defaults back (enter.reset_signals).
    ignored = {signum: _signal.signal(signum, _signal.SIG_IGN) for signum in _TERMINAL}
    was_subreaper = reaping.become_subreaper()  # the holder's orphans are ours to reap
    try:
        holder, sock = spawn_holder(cgroup_dirs)
    except BaseException as exc:
        for signum, handler in ignored.items():
            _signal.signal(signum, handler)
        if not was_subreaper:
            reaping.stop_being_subreaper()
        if isinstance(exc, BlockingIOError):  # fork's EAGAIN: no process left to the user
            raise no_process(exc) from None
        raise
    forward = Forwarder(holder, ignored)
    userns_fd = -1
    directory = ""
    pasta: Child | None = None
    proxy: _socket.socket | None = None
    routing: _socket.socket | None = None
    try:
        trace.phase("holder spawned")
        if check is not None:
            check()
        directory = make_private_dir()
        userns_fd, routing = wait_netns(holder, sock, forward)
        trace.phase("holder namespace and tap device up")
        pasta = spawn_pasta(holder, directory, cgroup_dirs)
        trace.phase("pasta spawned")
        # The holder writes the packet filter now (or starts the nf_tables tools, whose
        # commit waits in the kernel while pasta attaches and the launcher plans); its
        # answer waits in the channel for Jail.run. The egress proxy is forked later, once
        # the plan is made (Jail.run): its start is CPU, which on two cores slowed the
        # plan by as much as it took.
        wire.send(sock, netfilter.request())
        proxy, proxy_end = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except BaseException as exc:
        # A holder that ended by itself (a broken pipe here) is told apart before _end kills it.
        gone = isinstance(exc, (BrokenPipeError, ConnectionResetError)) and forward.exited()
        if routing is not None:
            routing.close()
        _end(sock, forward, (pasta, holder), (userns_fd,), directory, proxy, was_subreaper)
        if isinstance(exc, OSError):  # a full /tmp, fork's EAGAIN under max-pids, ...
            # ... or a holder a forwarded TERM ended (the DNS filter request then meets
            # a broken pipe): that reads as the signal, not as a jail error.
            forward.check()
            if gone:
                raise _ended(forward) from None
            if isinstance(exc, BlockingIOError):  # pasta's spawn, the tie program's fork
                raise no_process(exc) from None
            where = f": {exc.filename}" if exc.filename else ""
            raise jail_error(f"{exc.strerror or exc}{where}") from None
        raise
    return Early(holder, sock, forward, userns_fd, directory, pasta, proxy, proxy_end, routing,
                 trace, cgroup_dirs, was_subreaper)
