"""The egress jail: a per-launch network namespace that reaches the internet
and nothing private (docs/explanation/egress-jail.md).

The order is the security argument, and every step fails closed:

1. jail_start.begin(): an `unshare -rn` holder re-enters this package with
   the same root-owned interpreter; as soon as its namespace exists (before
   its Python has even started) pasta attaches to it from outside, where it
   has the internet. start() takes over what begin() started, and the caller
   builds the bwrap command line while pasta works.
2. run(): the holder reads what pasta configured, programs the routes in one
   `ip -batch` call that ends by reading back every table and rule, switches
   IPv6 off; the parent compares the read-back with the plan (routes.py) and
   refuses on any difference. Only then do the inside relays start and the
   holder exec the session, in the same namespace, with the terminal.
3. The parent waits, ignoring INT/QUIT (they belong to the agent) and
   forwarding TERM/HUP, then stops pasta, the relays and the holder and
   removes the private directory.

The namespace is owned by a user namespace above the sandbox's own, so the
agent cannot change these routes (bwrap drops capabilities).
"""

from __future__ import annotations

# The C modules: `signal` and `socket` import enum, `subprocess` much more
# (threading, locale): about 10 ms that would delay the launch (ADR 0004).
import _signal  # type: ignore[import-not-found]
import _socket
import array
import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from . import jail_start, paths, relays, routes
from .errors import EXIT_JAIL, EXIT_UNAVAILABLE, SandboxError
from .holder import ENCODING, ERRORS, recv_frame, send_frame
from .record import record

PASTA_TIMEOUT = 10.0
# How long a failed pasta waits for the holder whose exit may have caused it.
HOLDER_GRACE = 0.2
PASTA_ATTEMPTS = 3
KILL_WAIT = 2.0
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_RESOLV_KEEP = ("search", "domain", "options")
# Every table and every policy rule; run once per family, since the family of
# a "default" or blackhole route is not in `ip`'s text.
READBACK = "route show table all\nrule show\n"


@record
class JailSettings:
    allow_ip: tuple[str, ...]
    local_ports: tuple[int, ...]
    callback_ports: tuple[int, ...]
    trace: bool
    host: tuple[str, ...] = ()  # every IPv4 address and gateway of the host: blackholed


# --- the plan, for `claude-sandbox explain` ----------------------------------


def explain_lines(allow_ip: Sequence[str] = ()) -> list[str]:
    """The route plan for example addresses, without starting anything."""
    return routes.explain_plan(allow_ip=allow_ip)


# --- start -------------------------------------------------------------------


def _write_resolv_conf(directory: str) -> str:
    """resolv.conf naming pasta's forwarder; keeps search/domain/options.

    pasta answers only queries sent to the forwarder address; queries to the
    real resolver (inside blackholed 10/8 here) would time out (measured).
    """
    kept: list[str] = []
    with contextlib.suppress(OSError), open("/etc/resolv.conf") as f:
        kept = [
            line.rstrip("\n") for line in f if line.split()[:1] and line.split()[0] in _RESOLV_KEEP
        ]
    path = os.path.join(directory, "resolv.conf")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(f"nameserver {paths.DNS_FORWARDER}\n")
        out.writelines(line + "\n" for line in kept)
    return path


def _set_not_dumpable() -> None:
    """The waiting parent holds the jail's control socket: keep same-user
    processes (the agent included) out of its memory and descriptors (egress-jail.md, Channels)."""
    if jail_start.load_libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise SandboxError("egress jail: cannot mark the launcher not dumpable", EXIT_JAIL)


def _become_subreaper() -> bool:
    """Adopt what outlives its own parent; whether this process was a subreaper already.

    The inside relays (their parent, the holder, becomes bwrap and exits
    before them) and bwrap's init (bwrap exits as soon as the sandbox reports
    the command's status, before its init has exited). Reparented here,
    close() reaps them; otherwise, in a container without an init that
    reaps, they stay zombies.
    """
    import ctypes

    libc = jail_start.load_libc()
    before = ctypes.c_int(0)
    libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SandboxError("egress jail: cannot adopt the launch's orphans (subreaper)", EXIT_JAIL)
    return bool(before.value)


def start(settings: JailSettings, early: jail_start.Early | None = None) -> Jail:
    """Take over (or begin) the holder and pasta's attach; return at once so the
    caller can build its command line while pasta works. `early` is what the
    caller started with jail_start.begin() before importing this module."""
    if early is None:
        early = jail_start.begin(settings.trace)
    jail = Jail(settings, early)
    try:
        jail._start()
    except BaseException:
        jail.close()
        raise
    return jail


class Jail:
    """One launch's jail. Use run() once, or close() to abandon it."""

    resolv_conf: str

    def __init__(self, settings: JailSettings, early: jail_start.Early) -> None:
        self.settings = settings
        self.resolv_conf = ""
        self._dir: str | None = early.directory
        self._sock: _socket.socket = early.sock
        self._holder: jail_start.Child = early.holder
        self._forward: jail_start.Forwarder | None = early.forward
        self._pasta: jail_start.Child = early.pasta
        self._outside: list[tuple[relays.Relay, jail_start.Child]] = []
        self._inside_pidfds: list[tuple[int, int]] = []
        # An open descriptor of the holder's user namespace, held until close():
        # it identifies what the holder left behind, and holding it keeps the
        # kernel from giving its inode number to another launch's namespace.
        self._userns_fd: int | None = early.userns_fd
        self._session_started = False
        self._was_subreaper = True  # until _start() knows: never clear what was not ours
        self._plan: routes.Plan | None = None
        self._closed = False
        self._clock = early.clock
        self.warnings: list[str] = []
        # Every process this launch started (holder, pasta, relays),
        # for leak checks and the benchmark's resident-memory figures.
        self.started: dict[str, int] = {"holder": early.holder.pid}

    # -- helpers --

    def _trace(self, phase: str) -> None:
        self._clock = jail_start.phase(self.settings.trace, phase, self._clock)

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        print(f"claude-sandbox: warning: {message}", file=sys.stderr)

    @property
    def private_dir(self) -> str | None:
        return self._dir

    def _path(self, name: str) -> str:
        assert self._dir is not None
        return os.path.join(self._dir, name)

    # -- start --

    def _start(self) -> None:
        # Ctrl-C and Ctrl-\ are ignored and TERM and HUP forwarded to the
        # holder since begin() (Forwarder). Everything below overlaps pasta's
        # attach and the holder's start-up.
        assert self._dir is not None
        self.resolv_conf = _write_resolv_conf(self._dir)
        _set_not_dumpable()
        self._was_subreaper = _become_subreaper()
        self._start_outside_relays()
        jail_start.sweep_stale_dirs()
        self._trace("resolv.conf, not dumpable, outside relays, stale directories")

    def _start_outside_relays(self) -> None:
        want = relays.plan_relays(
            self.settings.local_ports, self.settings.callback_ports, self._dir or ""
        )
        if not want:
            return
        socat = paths.tool("socat")
        for relay in want:
            if relay.kind == "callback" and relays.port_taken(relay.port):
                self._warn(
                    f"callback-port {relay.port}: 127.0.0.1:{relay.port} is already in use; "
                    "relay skipped"
                )
                continue
            proc = relays.spawn_outside(relay, socat)
            self.started[f"outside-relay-{relay.kind}-{relay.port}"] = proc.pid
            self._outside.append((relay, proc))

    # -- run --

    def run(self, argv: Sequence[str], env: Mapping[str, str], fds: Sequence[int] = ()) -> int:
        """Lock the routes, run the session, tear down; the session's status.

        `fds` are descriptors the session must inherit at the same numbers
        (bwrap's --seccomp FD, a gitconfig pipe): they travel to the holder
        over the socketpair (SCM_RIGHTS), since it started before they existed.
        """
        return self._run(argv, env, fds, tamper=())

    def _run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        fds: Sequence[int],
        tamper: Sequence[str],
    ) -> int:
        # `tamper` lets the real-namespace tests change a table between
        # programming and read-back; run() always passes nothing.
        try:
            try:
                self._wait_pasta()
                self._lock_routes(tamper)
                self._start_inside_relays()
                self._exec(argv, env, fds)
            except _HolderGone:
                return self._holder_status()
            self._trace("session started")
            status = self._holder_status()
            self._trace("session ended")
            return status
        finally:
            self.close()
            self._trace("teardown")

    def _holder_status(self) -> int:
        code = self._holder.wait()
        if self._forward is not None:
            return self._forward.forward.status(code)
        return 128 - code if code < 0 else code

    def _holder_ends_within(self, seconds: float) -> bool:
        """Whether the holder has ended, or does within `seconds`. An exiting
        holder lets go of its namespaces before it becomes a zombie: pasta can
        fail on them in that window, before waitpid can see the exit."""
        deadline = time.monotonic() + seconds
        while self._holder.poll() is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def _wait_pasta(self) -> None:
        """Wait until pasta has configured the namespace: its pid file is written."""
        pidfile = self._path("pasta.pid")
        deadline = time.monotonic() + PASTA_TIMEOUT
        attempt = 0
        while True:
            with contextlib.suppress(FileNotFoundError):
                if os.stat(pidfile).st_size > 0:
                    break
            rc = self._pasta.poll()
            if rc is not None:
                if self._holder_ends_within(HOLDER_GRACE):
                    raise _HolderGone  # a signal ended the launch while pasta attached
                if "Permission denied" not in self._pasta_log() or attempt + 1 >= PASTA_ATTEMPTS:
                    raise SandboxError(f"egress jail: pasta failed: {self._pasta_log()}", EXIT_JAIL)
                # The exec window described in jail_start.wait_netns: try again.
                attempt += 1
                self._trace(f"pasta attach retried (attempt {attempt})")
                assert self._dir is not None
                self._pasta = jail_start.spawn_pasta(self._holder, self._dir)
            if time.monotonic() > deadline:
                raise SandboxError("egress jail: pasta did not attach in time", EXIT_JAIL)
            time.sleep(0.0005)
        # pasta -f writes its own pid: the process started here, which teardown
        # ends by that pid. Anything else in the file is not the pasta we know.
        try:
            with open(pidfile) as f:
                named = int(f.read().strip())
        except (OSError, ValueError):
            named = -1
        if named != self._pasta.pid:
            raise SandboxError(
                f"egress jail: pasta's pid file names {named}, not the pasta started "
                f"({self._pasta.pid})",
                EXIT_JAIL,
            )
        self.started["pasta"] = self._pasta.pid
        self._trace("pasta attached")

    def _pasta_log(self) -> str:
        try:
            with open(self._path("pasta.log"), errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            lines = []
        useful = [line for line in lines if "syslog" not in line]
        return useful[-1] if useful else "no message"

    def _ask(self, fields: list[str]) -> list[str]:
        try:
            send_frame(self._sock, fields)
            reply = recv_frame(self._sock)
        except OSError:
            reply = None
        if reply is None:
            raise _HolderGone
        return reply

    def _ip(self, args: list[str], stdin_text: str = "") -> tuple[int, str, str]:
        reply = self._ask(["run", stdin_text, paths.tool("ip"), *args])
        if reply[0] != "ok":
            raise SandboxError(f"egress jail: {reply[1]}", EXIT_JAIL)
        return int(reply[1]), reply[2], reply[3]

    def _lock_routes(self, tamper: Sequence[str]) -> None:
        rc, out, err = self._ip(["-j", "-4", "-batch", "-"], "addr show\nroute show table main\n")
        docs = routes.parse_json_stream(out)
        if rc != 0 or len(docs) != 2:
            raise SandboxError(f"egress jail: cannot read the namespace: {err.strip()}", EXIT_JAIL)
        facts = routes.parse_facts(docs[0], docs[1])
        plan = routes.build_plan(facts, paths.DNS_FORWARDER, self.settings.allow_ip,
                                 self.settings.host)
        self._plan = plan
        self._trace("namespace read, plan built")
        v6 = self._ask(["ipv6off"])
        if v6[0] == "ok" and v6[1]:
            # Not fatal by itself: the read-back proves what IPv6 still holds.
            self._trace(f"IPv6 not fully switched off ({v6[1]})")
        # Programme and first read-back in one `ip` process: no window in
        # which a route could change unseen between the two besides `tamper`.
        script = plan.batch() + "".join(f"{t}\n" for t in tamper)
        script += READBACK
        _, out4, err = self._ip(["-4", "-force", "-j", "-batch", "-"], script)
        _, out6, _ = self._ip(["-6", "-j", "-batch", "-"], READBACK)
        failed = self._failed_rows(plan, routes.failed_lines(err), len(tamper), err)
        readback = routes.parse_readback(out4, out6)
        problems = routes.compare(plan, failed, readback)
        if problems:
            raise SandboxError(
                "egress jail: the routes read back differ from the plan; refusing to launch: "
                + "; ".join(problems[:5]),
                EXIT_JAIL,
            )
        self._trace("routes programmed and verified")
        self._filter_dns()

    def _filter_dns(self) -> None:
        """Only DNS reaches the forwarder (routes.dns_filter); read back like the routes.

        One run does both (`iptables-restore && iptables-save`): a separate read-back
        run right after the restore was seen to lose the holder's reply under CPU load.
        """
        dns = paths.DNS_FORWARDER
        restore, save = paths.tool("iptables-restore"), paths.tool("iptables-save")
        script = f"{restore} && exec {save} -t filter"
        reply = self._ask(["run", routes.dns_filter_restore(dns), paths.tool("sh"), "-c",
                           script])
        if reply[0] != "ok" or reply[1] != "0":
            why = reply[1] if reply[0] != "ok" else reply[3].strip()
            raise SandboxError(f"egress jail: iptables failed ({why}); the DNS forwarder "
                               "cannot be limited to DNS; install the iptables package",
                               EXIT_JAIL)
        problem = routes.filter_differs(dns, reply[2])
        if problem:
            raise SandboxError(f"egress jail: the DNS filter read back differs ({problem}); "
                               "refusing to launch", EXIT_JAIL)
        self._trace("DNS filter programmed and verified")

    def _failed_rows(self, plan: routes.Plan, lines: set[int], extra: int, err: str) -> set[int]:
        """Map failed batch lines to plan rows; refuse when a required one failed.

        Line 1 is the flush, lines 2.. are plan.routes, then `extra` tamper
        lines, then the two read-back commands.
        """
        failed: set[int] = set()
        last_row = len(plan.routes) + 1
        for line in sorted(lines):
            if line == 1 or line > last_row + extra:
                raise SandboxError(
                    f"egress jail: route programming failed ({err.strip()})", EXIT_JAIL
                )
            if line > last_row:
                continue  # a test's tampering: the read-back must catch its effect
            row = plan.routes[line - 2]
            if row.required:
                raise SandboxError(
                    f"egress jail: cannot program `ip {row.command}` ({err.strip()})", EXIT_JAIL
                )
            failed.add(line - 2)
            self._warn(f"egress jail: could not add `ip {row.command}` ({row.why}); skipped")
        return failed

    def _start_inside_relays(self) -> None:
        if not self._outside:
            return
        socat, setpriv = paths.tool("socat"), paths.tool("setpriv")
        for relay, proc in self._outside:
            if not relays.wait_ready(relay, proc):
                self._warn(f"{relay.kind}-port {relay.port}: outside relay did not start")
                continue
            kind, where = relay.inside_listener()
            reply = self._ask(["relay", kind, where, *relay.inside_argv(socat, setpriv)])
            if reply[0] != "ok":
                self._warn(f"{relay.kind}-port {relay.port}: {reply[1]}")
                continue
            pid = int(reply[1])
            self.started[f"inside-relay-{relay.kind}-{relay.port}"] = pid
            with contextlib.suppress(OSError):
                self._inside_pidfds.append((pid, os.pidfd_open(pid)))
        self._trace("relays started")

    def _exec(self, argv: Sequence[str], env: Mapping[str, str], fds: Sequence[int]) -> None:
        fields = ["exec", str(len(argv)), *argv, str(len(fds)), *map(str, fds)]
        fields += [f"{k}={v}" for k, v in env.items()]
        payload = "\0".join(fields).encode(ENCODING, ERRORS)
        frame = len(payload).to_bytes(4, "big") + payload
        try:
            # The descriptors ride on the frame's first byte.
            sent = (
                self._sock.sendmsg(
                    [frame[:1]], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", fds))]
                )
                if fds
                else 0
            )
            self._sock.sendall(frame[sent:])
            reply = recv_frame(self._sock)
        except OSError:
            raise _HolderGone from None
        # EOF: the close-on-exec socket closed because the exec succeeded.
        if reply is not None:
            raise SandboxError(f"egress jail: {reply[1]}", EXIT_UNAVAILABLE)
        self._session_started = True
        if self._forward is not None:
            self._forward.session_started()

    # -- teardown --

    def close(self) -> None:
        """Stop everything this launch started and remove its files; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._sock.close()
        if self._holder.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._holder.kill()
        self._holder.wait()
        # Signal everything first and wait once for all of it: each SIGKILLed
        # process takes milliseconds to exit, and waiting for them one after
        # another added those up on every launch.
        dying: list[int] = []
        if self._pasta.poll() is None:
            # pasta does not exit when the namespace dies (measured): end it. It is
            # our child (-f), not yet reaped, so its pid cannot have been reused.
            with contextlib.suppress(OSError):
                dying.append(os.pidfd_open(self._pasta.pid))
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pasta.pid, _signal.SIGKILL)
        relay_groups = {pid for pid, _ in self._inside_pidfds}
        for pid, pidfd in self._inside_pidfds:
            # The session is gone, so a relay group still exists only if its
            # leader (or a connection child) still runs: the pgid is then ours.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, _signal.SIGKILL)
            _send_kill(pidfd)
            dying.append(pidfd)
        self._inside_pidfds.clear()
        for _, proc in self._outside:
            # Not yet reaped, so its pid (= its group) cannot have been reused.
            with contextlib.suppress(OSError):
                dying.append(os.pidfd_open(proc.pid))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, _signal.SIGKILL)
        if self._userns_fd is not None and not self._session_started:
            # The holder died (a signal) before it became the session. Whatever
            # it spawned and had not yet reported, above all an inside relay it
            # was waiting for (its pid travels only in the reply), is orphaned
            # with no pid on record. It still lives in the holder's user
            # namespace, which nothing outside this launch shares: end that.
            userns = os.fstat(self._userns_fd)
            dying += _kill_matching(lambda pid: _in_namespace(pid, userns))
        _wait_all(dying)
        _reap_orphans(relay_groups)
        if not self._was_subreaper:
            # Orphans reparented while this process was a subreaper are reaped
            # above; a caller that lives on (a test runner) gets its role back.
            jail_start.load_libc().prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        self._pasta.wait()
        for _, proc in self._outside:
            proc.wait()
        self._outside.clear()
        if self._userns_fd is not None:
            os.close(self._userns_fd)
            self._userns_fd = None
        if self._dir is not None:
            jail_start.remove_dir(self._dir)
            self._dir = None
        if self._forward is not None:
            self._forward.restore()
            self._forward = None

    def plan_lines(self) -> list[str]:
        """The plan this jail programmed (or the example plan before run())."""
        if self._plan is None:
            return explain_lines(self.settings.allow_ip)
        return routes.plan_lines(self._plan)


class _HolderGone(Exception):
    """The holder closed the channel before the session started (a signal)."""


def _send_kill(pidfd: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        _signal.pidfd_send_signal(pidfd, _signal.SIGKILL)


def _wait_all(pidfds: list[int]) -> None:
    """Wait until every process has exited (bounded), then close the pidfds.

    Waiting makes "no process outlives a launch" true when run() returns,
    not some milliseconds later. A pidfd polls readable once the process
    has exited, even when it is not our child (the inside relays are not).
    """
    pending = list(pidfds)
    deadline = time.monotonic() + KILL_WAIT
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(pending, [], [], left)
        pending = [fd for fd in pending if fd not in ready]
    for fd in pidfds:
        os.close(fd)


def _orphans(groups: set[int]) -> list[tuple[int, str]]:
    """Children reparented to this subreaper by the launch: (pid, state).

    The inside relays' groups (leaders and connection children), and bwrap's
    init, which runs in this process's group with the session.
    """
    ours = os.getpgrp()
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                children = [int(pid) for pid in f.read().split()]
        except OSError:
            continue
        for pid in children:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    head, tail = f.read().rsplit(")", 1)
                state, group = tail.split()[0], int(tail.split()[2])
            except (OSError, ValueError, IndexError):
                continue
            comm = head.partition("(")[2]
            if group in groups or (group == ours and comm == "bwrap"):
                found.append((pid, state))
    return found


def _reap_orphans(groups: set[int]) -> None:
    """Wait (bounded) for the launch's orphans to exit, and reap them; nothing
    else, so no other child's status is taken from whoever waits for it."""
    pending = _orphans(groups)
    pidfds = []
    for pid, state in pending:
        if state != "Z":
            with contextlib.suppress(OSError):
                pidfds.append(os.pidfd_open(pid))
    _wait_all(pidfds)
    for pid, _ in pending:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _in_namespace(pid: int, userns: os.stat_result) -> bool:
    try:
        st = os.stat(f"/proc/{pid}/ns/user")
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (userns.st_dev, userns.st_ino)


def _kill_matching(match: Callable[[int], bool]) -> list[int]:
    """SIGKILL every process `match` accepts; their pidfds, for _wait_all.

    Only the rare teardowns a signal interrupted get here: a scan of /proc
    costs a few milliseconds. A pidfd is taken before the second check, so
    the process killed is the one checked, not a later one with its pid.
    """
    me = os.getpid()
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me or not match(int(name)):
            continue
        try:
            pidfd = os.pidfd_open(int(name))
        except OSError:
            continue
        if match(int(name)):
            _send_kill(pidfd)
            found.append(pidfd)
        else:
            os.close(pidfd)
    return found
