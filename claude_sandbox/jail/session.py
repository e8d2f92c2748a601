"""The egress jail: a per-launch network namespace that reaches the internet
and nothing private (docs/explanation/egress-jail.md).

The order is the security argument, and every step fails closed:

1. jail_start.begin(): the launcher forks the holder, which makes its own user,
   network and mount namespaces; as soon as it says they exist pasta attaches
   to it from outside, where it has the internet, and the holder starts the packet filter's commit
   (netfilter.py). start() takes over, while the caller makes the plan.
2. run(): the holder forks the egress proxy, which takes its policy and the
   session's record; the launcher locks the routes through a routing socket of the
   namespace (lock.py), refusing on any difference from the plan (routes.py),
   then on any in the filter's read-back. Only then do the inside relays start, the
   proxy say it serves, and the holder exec the session, with the terminal.
3. The parent waits, ignoring INT/QUIT (they belong to the agent) and
   forwarding TERM/HUP, then stops the proxy (closing its control socket lets
   it record what is still open), pasta, the relays and the holder and
   removes the private directory.

The namespace is owned by a user namespace above the sandbox's own, so the
agent cannot change these routes (bwrap drops capabilities).
"""

from __future__ import annotations

# The C modules: `signal` and `socket` import enum, `subprocess` much more
# (threading, locale): about 10 ms that would delay the launch (ADR 0004).
import _signal  # type: ignore[import-not-found]
import _socket
import os
import select
import sys

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError, jail_error
from claude_sandbox.core.process import Child
from claude_sandbox.core.trace import Trace
from claude_sandbox.jail import channel, dirs, lock, netfilter, reaping, relays, routes
from claude_sandbox.jail import holder as jail_holder
from claude_sandbox.jail import start as jail_start
from claude_sandbox.jail.egresspolicy import Policy
from claude_sandbox.jail.holder import wait_listening
from claude_sandbox.jail.spec import JailSpec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

# How long the proxy has, once the session ended, to record what was still open.
PROXY_GRACE = 1.0


def start(settings: JailSpec, early: jail_start.Early | None = None) -> Jail:
    """Take over (or begin) the holder and pasta's attach; return at once so the
    caller can prepare the sandbox while pasta works. `early` is what the
    caller started with jail_start.begin() before importing this module."""
    if early is None:
        early = jail_start.begin(Trace(False, "jail"))
    jail = Jail(settings, early)
    try:
        jail._start()
    except BaseException:
        jail.close()
        raise
    return jail


class Jail:
    """One launch's jail. Use run() once, or close() to abandon it."""

    def __init__(self, settings: JailSpec, early: jail_start.Early) -> None:
        self.settings = settings
        self.private_dir: str | None = early.directory  # None once removed
        self._sock: _socket.socket = early.sock
        self._holder: Child = early.holder
        self._forward = early.forward
        self._pasta: Child = early.pasta
        self._proxy_ctl: _socket.socket = early.proxy
        self._proxy_end: _socket.socket = early.proxy_end  # the holder's, once asked
        self._routing: _socket.socket = early.routing  # closed once the routes are locked
        self._proxy_pidfd = -1
        self._filter_pidfd = -1  # the filter's tool, started and not yet answered for
        self._outside: list[tuple[relays.Relay, Child]] = []
        self._inside_pidfds: list[tuple[int, int]] = []
        # An open descriptor of the holder's user namespace, held until close():
        # it identifies what the holder left behind, and holding it keeps the
        # kernel from giving its inode number to another launch's namespace.
        self._userns_fd = early.userns_fd
        self._session_started = False
        self._was_subreaper = early.was_subreaper  # never clear what was not ours
        self._plan: routes.Plan | None = None
        self._closed = False
        self._dying: list[int] = []  # pidfds of what stop() ended, for close() to wait on
        self._restored = False  # the signals given back (stop(), else close())
        self._trace = early.trace.phase
        self._cgroup_dirs = early.cgroup_dirs
        self.warnings: list[str] = []
        # Every process this launch started, for leak checks and the bench's memory figures.
        self.started: dict[str, int] = {"holder": early.holder.pid}

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        print(f"claude-sandbox: warning: {message}", file=sys.stderr)

    def _start(self) -> None:
        # Ctrl-C and Ctrl-\ are ignored and TERM and HUP forwarded to the
        # holder since begin() (Forwarder). Everything below overlaps pasta's
        # attach and the holder's start-up.
        reaping.set_not_dumpable()
        want = relays.plan_relays(self.settings, self.private_dir or "")
        socat = paths.tool("socat") if want else ""
        for relay in want:
            if relay.kind == "callback" and relays.port_taken(relay.port):
                self._warn(f"callback-port {relay.port}: 127.0.0.1:{relay.port} is already "
                           "in use; relay skipped")
                continue
            proc = relays.spawn_outside(relay, socat, self._cgroup_dirs)
            self.started[f"outside-relay-{relay.kind}-{relay.port}"] = proc.pid
            self._outside.append((relay, proc))
        dirs.sweep_stale_dirs()
        self._trace("not dumpable, outside relays, stale directories")

    def run(self, argv: Sequence[str], env: Mapping[str, str], fds: Sequence[int] = (),
            overlays: Sequence[tuple[str, str, str, str]] = (), record_fd: int = -1,
            broker: Sequence[str] = (), close: bool = True,
            views: tuple[list[str], Sequence[int]] | None = None) -> int:
        """Lock the routes, run the session, tear down; the session's status. `close`:
        False to only begin the teardown once the session has ended (stop), and leave
        the waiting to the caller's close(), which the caller then must call.

        `fds`: descriptors the session inherits at the same numbers (bwrap's --seccomp FD,
        a gitconfig pipe), sent to the holder (SCM_RIGHTS). `record_fd`: the session's
        egress record (egressrecord.create), or none (/dev/null). `views`: a root launch's
        (core/viewplaces.request). `broker`: the credential broker's fields, real values
        included, which reach the proxy over its control socket only (egressinject.py).
        """
        try:
            # The packet filter, written and read back already, or its tool started.
            self._filter_pidfd = netfilter.answer(self._receive())
            # The proxy starts and takes its policy as the routes are locked (ADR 0004).
            channel.send(self._sock, ["proxy"], [self._proxy_end.fileno()])
            self._proxy_end.close()
            self._proxy_started(self._receive())
            self._give_policy(record_fd, broker)
            self._trace("packet filter answered, proxy forked, policy given")
            self._wait_pasta()
            self._plan = lock.lock_routes(self._routing, self._ask, self._trace, self._warn,
                                          self.settings)
            self._routing.close()
            # Before anything more runs in the namespace: the filter as planned, or no launch.
            if self._filter_pidfd >= 0:
                reply = self._ask(["finish"])  # answered once the holder has reaped the tool
                os.close(self._filter_pidfd)
                self._filter_pidfd = -1
                netfilter.check(reply)
            self._trace("packet filter programmed and verified")
            self._start_inside_relays()
            if views is not None and (reply := self._ask(*views))[0] != "ok":  # ADR 0020
                raise SandboxError(reply[1], EXIT_UNAVAILABLE)
            for overlay in overlays:  # (lower, upper, work, target): core/views.py
                reply = self._ask(["overlay", *overlay])
                if reply[0] != "ok":
                    raise SandboxError(
                        f"cannot show {overlay[3]} to the sandbox as an overlay ({reply[1]}): "
                        "the kernel must allow overlayfs in a user namespace (Linux 5.11 or "
                        "later)", EXIT_UNAVAILABLE)
            self._trace("overlays mounted")
            self._policy_taken()
            self._trace("proxy serving")
            self._exec(argv, env, fds)
            self._trace("session started")
            status = self._holder_status()
            self._trace("session ended")
            return status
        except reaping.HolderGone:
            status = self._holder_status()
            if not self._forward.quiet_end():
                ended = jail_start.holder_ended(self._holder.wait(), status)
                sys.stderr.write(f"claude-sandbox: {ended}\n")
            return status
        finally:
            if close or not self._session_started:
                self.close()
            else:
                self.stop()
                self._trace("teardown begun")

    def _holder_status(self) -> int:
        return self._forward.forward.status(self._holder.wait())

    def _wait_pasta(self) -> None:
        assert self.private_dir is not None
        jail_start.wait_attached(self.private_dir, self._pasta, self._forward)
        self.started["pasta"] = self._pasta.pid
        self._trace("pasta attached")

    def _ask(self, fields: list[str], fds: Sequence[int] = ()) -> list[str]:
        channel.send(self._sock, fields, list(fds))
        return self._receive()

    def _receive(self) -> list[str]:
        reply = channel.answer(self._sock)
        if not reply:
            raise reaping.HolderGone
        return reply

    def _proxy_started(self, reply: list[str]) -> None:
        if reply[0] != "ok":
            raise jail_error(f"cannot start the egress proxy: {reply[1]}")
        pid = int(reply[1])
        self.started["proxy"] = pid
        try:
            self._proxy_pidfd = os.pidfd_open(pid)
        except OSError:
            raise jail_error("the egress proxy ended as it started") from None

    def _give_policy(self, record_fd: int, broker: Sequence[str] = ()) -> None:
        """The proxy's policy and record; its answer (_policy_taken) says it serves."""
        spec = self.settings
        policy = Policy(spec.egress_policy, spec.agent, spec.rules, spec.allow_ip, spec.host,
                        spec.hosts_file, spec.upstream)
        record = record_fd if record_fd >= 0 else os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        # The host's routing table, from this (the host's) network namespace: the proxy
        # asks it whether an upstream address is the host's own at connect time.
        try:
            routes = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW | _socket.SOCK_CLOEXEC)
        except OSError as exc:
            if record_fd < 0:
                os.close(record)
            raise jail_error(f"cannot read the host's routing table over netlink "
                             f"({exc.strerror or exc}); the egress proxy could not tell the "
                             "host's own addresses") from None
        try:  # a proxy that could not start said why and ended: its line is read below
            channel.send(self._proxy_ctl, ["policy", *policy.fields(), *broker],
                         [record, routes.fileno()])
        except reaping.HolderGone:
            pass
        finally:
            routes.close()
            if record_fd < 0:
                os.close(record)

    def _policy_taken(self) -> None:
        """The proxy's answer to its policy: serving, or the launch is refused."""
        try:
            reply = channel.answer(self._proxy_ctl)
        except reaping.HolderGone:
            reply = None
        if not reply or reply[0] != "ok":
            # A signal that ends the launch during set-up reaches the holder's group, which
            # the proxy is in for the instant before its setsid: the signal, not a failure.
            if self._forward.exited():
                raise reaping.HolderGone
            why = reply[1] if reply and len(reply) > 1 else "it ended"
            raise jail_error(f"the egress proxy did not start ({why})")

    def _start_inside_relays(self) -> None:
        if not self._outside:
            return
        socat, setpriv = paths.tool("socat"), paths.tool("setpriv")
        for relay, proc in self._outside:
            if not wait_listening(*relay.listener(inside=False), proc):
                self._warn(f"{relay.kind}-port {relay.port}: outside relay did not start")
                continue
            kind, where = relay.listener(inside=True)
            reply = self._ask(["relay", kind, where, *relay.inside_argv(socat, setpriv)])
            if reply[0] != "ok":
                self._warn(f"{relay.kind}-port {relay.port}: {reply[1]}")
                continue
            pid = int(reply[1])
            self.started[f"inside-relay-{relay.kind}-{relay.port}"] = pid
            with reaping.Ignoring(OSError):
                self._inside_pidfds.append((pid, os.pidfd_open(pid)))
        self._trace("relays started")

    def _exec(self, argv: Sequence[str], env: Mapping[str, str], fds: Sequence[int]) -> None:
        fields = ["exec", str(len(argv)), *argv, str(len(fds)), *map(str, fds)]
        channel.send(self._sock, fields + [f"{k}={v}" for k, v in env.items()], list(fds))
        reply = channel.answer(self._sock)
        # EOF: the close-on-exec socket closed because the exec succeeded.
        if reply is not None:
            raise jail_error(reply[1] if len(reply) > 1 else "the jail refused the session",
                             EXIT_UNAVAILABLE)
        self._session_started = True
        self._forward.session_started()

    def stop(self) -> None:
        """Begin the teardown: pasta killed, and once the session is over, the proxy's
        control closed, on which it records what is still open and exits, and the
        session's last process waited for. close() waits for pasta and the proxy; the
        launcher applies the workspace's exit meanwhile (steps.py)."""
        self._sock.close()
        self._routing.close()
        # pasta first: it does not exit when the namespace dies (measured), and its exit
        # (freeing the tables it zeroed at its start) takes 2-3 ms, which pass while the
        # proxy records what is still open. It is our child (-f), not yet reaped, so its
        # pid cannot have been reused. Nothing below needs the network.
        if not self._dying and self._pasta.poll() is None:
            with reaping.Ignoring(OSError):
                self._dying.append(os.pidfd_open(self._pasta.pid))
            self._pasta.kill()
        if self._holder.poll() is None or self._proxy_ctl.fileno() < 0:
            return  # the session still runs (close() ends it first), or this ran already
        # The proxy's last word, where it failed once the session had started.
        if select.select([self._proxy_ctl], [], [], 0)[0]:
            with reaping.Ignoring(reaping.HolderGone):
                said = channel.answer(self._proxy_ctl)
                if said and said[0] == "err" and len(said) > 1:
                    self._warn(said[1])
        self._proxy_end.close()
        self._proxy_ctl.close()
        # bwrap's monitor (the holder's pid) ends as the agent's command does; its init
        # ends after it, and the pid namespace's every process before the init can be
        # reaped. Nothing of the agent runs once it is: only then is the workspace's exit
        # made (steps.py), and no signal is forwarded by a pid that is no one's now.
        reaping.reap_orphans(set())
        self._forward.restore()
        self._restored = True

    def close(self) -> None:
        """Stop everything this launch started and remove its files; idempotent."""
        if self._closed:
            return
        self._closed = True
        self.stop()
        dying = self._dying
        if self._holder.poll() is None:
            self._holder.kill()  # not reaped, so it exists
        self._holder.wait()
        if self._filter_pidfd >= 0:  # the holder died with the tool unreaped: now ours
            reaping.kill_and_reap(self._filter_pidfd)
            self._filter_pidfd = -1
        # The session is over: the proxy records what is still open and exits.
        self._proxy_end.close()  # not yet sent when the launch ended before run()
        self._proxy_ctl.close()
        if (self._proxy_pidfd >= 0
                and not select.select([self._proxy_pidfd], [], [], PROXY_GRACE)[0]):
            reaping.send_kill(self._proxy_pidfd)
        # Signal everything first and wait once for all of it: each SIGKILLed
        # process takes milliseconds to exit, and waiting for them one after
        # another added those up on every launch.
        # Every relay group: a connection child outlives its killed relay by an
        # instant, is reparented here (a subreaper), and must be reaped too.
        relay_groups = {pid for pid, _ in self._inside_pidfds}
        relay_groups |= {proc.pid for _, proc in self._outside}
        if self._proxy_pidfd >= 0:
            # Its own session and group (setsid); the holder's child, ours once
            # bwrap (the holder, exec'd) has gone.
            relay_groups.add(self.started["proxy"])
            dying.append(self._proxy_pidfd)
        for pid, pidfd in self._inside_pidfds:
            # The session is gone, so a relay group still exists only if its
            # leader (or a connection child) still runs: the pgid is then ours.
            with reaping.Ignoring(ProcessLookupError, PermissionError):
                os.killpg(pid, _signal.SIGKILL)
            reaping.send_kill(pidfd)
            dying.append(pidfd)
        for _, proc in self._outside:
            # Not yet reaped, so its pid cannot have been reused. The relay itself
            # is killed through its pidfd: a relay spawned an instant ago may not
            # have called setsid yet, and then its group does not exist (a launch
            # interrupted at once hung on such a relay). The group holds its
            # connection children.
            with reaping.Ignoring(OSError):
                pidfd = os.pidfd_open(proc.pid)
                reaping.send_kill(pidfd)
                dying.append(pidfd)
            with reaping.Ignoring(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, _signal.SIGKILL)
        orphans: list[int] = []
        if not self._session_started:
            # The holder died (a signal) before it became the session. Whatever
            # it spawned and had not yet reported, above all an inside relay it
            # was waiting for (its pid travels only in the reply), is orphaned
            # with no pid on record. It still lives in the holder's user
            # namespace, which nothing outside this launch shares: end that, and
            # the egress proxy, which a launcher cannot see there (kill_namespace).
            swept, orphans = reaping.kill_namespace(os.fstat(self._userns_fd),
                                                    jail_holder.PROXY_NAME)
            dying += swept
        reaping.wait_all(dying)
        reaping.reap(orphans)
        for _, proc in self._outside:
            # Reaped here, not by reap_orphans: Popen keeps its status. The
            # group's number stays taken while a member of it lives.
            proc.wait()
        reaping.reap_orphans(relay_groups)
        if not self._was_subreaper:
            # Orphans reparented while this process was a subreaper are reaped
            # above; a caller that lives on (a test runner) gets its role back.
            reaping.stop_being_subreaper()
        self._pasta.wait()
        os.close(self._userns_fd)
        if self.private_dir is not None:
            dirs.remove_at_teardown(self.private_dir)
            self.private_dir = None
        if not self._restored:
            self._forward.restore()
        self._trace("teardown")

