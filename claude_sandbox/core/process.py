"""Starting child processes on the launch path, without subprocess.

`subprocess` imports threading, selectors and locale (about 10 ms, ADR 0004), and glibc's
posix_spawn leaves signals ignored in the child; the launch path forks and execs itself
instead, here and nowhere else, but for the programs core/spawn.py says may be spawned.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum
import os
import time

from claude_sandbox.core import kernel
from claude_sandbox.core.errors import EXIT_UNAVAILABLE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence


class Child:
    """A child process, with the part of subprocess.Popen's interface jail/session.py uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone all the same (as status 0)
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        """The exit status (negative: the signal that ended it)."""
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)  # EINTR is retried (PEP 475)
            except ChildProcessError:
                self.returncode = 0
            else:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, _signal.SIGKILL)


def data_descriptor(name: str, data: bytes) -> int:
    """A descriptor holding `data`, read from its start: what bwrap reads for a data mount
    or the seccomp filter, what the inner stage reads. A memfd, not a pipe: a pipe holds 64 KiB
    before a write blocks, and nothing reads it until bwrap runs; and no file exists on
    disk. Close-on-exec: only the child it is meant for inherits it (fork_exec's
    `pass_fds`, or the jail holder, which places what it receives), never another
    program the launcher starts meanwhile (pasta, a relay)."""
    fd = os.memfd_create(f"claude-sandbox-{name}")
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def fork_exec(
    argv: Sequence[str],
    env: Mapping[str, str],
    streams: Mapping[int, int],
    setsid: bool,
    die_with_parent: bool = False,
    pass_fds: Sequence[int] = (),
    before_exec: Callable[[], None] | None = None,
    keep_fds: Sequence[int] = (),
) -> Child:
    """The one way the launch path starts a program: fork and exec, with `streams`
    (target fd: source fd) in place of 0, 1, 2, `pass_fds` kept open, and every
    other descriptor closed: whatever the launching process inherited (an IDE's
    socket, a terminal multiplexer's pipe) reaches no program of ours, and so never
    the sandbox (check 61).

    Not posix_spawn: glibc's posix_spawn leaves its two internal signals (32,
    33) ignored in the child, and an ignored disposition survives every exec
    down to the agent, where nothing can reset it. Python opens its own descriptors
    non-inheritable; what this process inherited is closed in the child below.
    Python ignores SIGPIPE and SIGXFSZ; the child gets them back at their
    defaults, as subprocess does (pasta even refuses to start otherwise:
    "Couldn't install signal handlers").

    `die_with_parent`: the kernel SIGKILLs the child when this process ends,
    even by SIGKILL, when nothing of ours can run to tear down (pasta and the
    outside relays: nothing else would ever end them). `before_exec` runs in
    the child last (joining a cgroup, ignoring the session's signals); `keep_fds`
    stay open for it, close-on-exec (a root launch's views, attached there).
    """
    if die_with_parent:
        from claude_sandbox.core.libc import load_libc

        load_libc()  # here, once: the child need not look prctl up
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            # Checked: a child that could outlive the launcher must not start.
            if die_with_parent and not tie_to_parent(parent):
                os._exit(127)
            for signum in (_signal.SIGPIPE, _signal.SIGXFSZ):
                _signal.signal(signum, _signal.SIG_DFL)
            if setsid:
                os.setsid()
            for target, source in streams.items():
                os.dup2(source, target)
            close_all_but({0, 1, 2, *pass_fds, *keep_fds})
            for fd in pass_fds:
                os.set_inheritable(fd, True)
            if before_exec is not None:
                before_exec()
            os.execve(argv[0], list(argv), dict(env))
        finally:
            os._exit(127)
    return Child(pid)


# Whether cloexec_inherited has marked every descriptor this process inherited: from then
# on a tool whose answer is read (spawn.capture) is spawned, not forked.
_inherited_marked = False


def cloexec_inherited() -> bool:
    """Mark close-on-exec every descriptor above 2 (the inherited ones lack it: Python
    opens its own so): no program spawned gets one. False where /proc cannot list them."""
    global _inherited_marked
    _inherited_marked = _each_listed(lambda fd: fd > 2,
                                     lambda fd: os.set_inheritable(fd, False))
    return _inherited_marked


def inherited_marked() -> bool:
    """Whether cloexec_inherited has marked every descriptor this process inherited."""
    return _inherited_marked


def _each_listed(which: Callable[[int], bool], do: Callable[[int], None]) -> bool:
    """`do` to each descriptor /proc/self/fd lists that `which` picks; False where it
    cannot be read. The listing's own descriptor is closed by then, and skipped."""
    try:
        found = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return False
    for fd in filter(which, found):
        try:
            do(fd)
        except OSError:
            pass
    return True


def close_all_but(keep: Iterable[int]) -> None:
    """Close every descriptor but `keep`, in a forked child.

    Those /proc/self/fd lists, not a range up to the soft limit: a launching process may
    have lowered its soft limit below a descriptor it holds open (an IDE's socket at
    2000 under `ulimit -n 1024`), which a close up to the limit would leave open. Where
    /proc cannot be read, every range between the kept ones, up to the hard limit: one
    close_range(2) each where the kernel and its seccomp filter allow it, else one close(2)
    a number, which up to the largest number a descriptor can have (2**31) would never
    end. A descriptor above the hard limit needs the hard limit lowered after it was
    opened, which only the launching process's owner can do to it.
    """
    kept = set(keep)
    if _each_listed(lambda fd: fd not in kept, os.close):
        return
    import resource
    top = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], (1 << 31) - 1)
    edges = sorted(fd for fd in kept if fd < top)
    for low, high in zip([-1, *edges], [*edges, top], strict=True):
        os.closerange(low + 1, high)


# The launcher-side processes of a session (bwrap, the jail holder once it is
# bwrap) ignore these, so that the agent decides what they mean: a bwrap that
# died of them would take the whole sandbox with it at once (--die-with-parent).
# The inner stage gives the agent the defaults back (enter.c, enter.reset_signals).
SESSION_IGNORED = (_signal.SIGINT, _signal.SIGQUIT, _signal.SIGHUP, _signal.SIGTERM)
# How long the agent has to end by itself after a TERM or a hang-up before the
# launcher ends the sandbox: a session is gone within this and a second.
GRACE = 1.0
RETRY = 0.005  # how soon a signal no process of the session took yet is sent again
_INHERITABLE = (_signal.SIGHUP, _signal.SIGTERM)  # never ignored by the launcher itself


def ignore_session_signals() -> None:
    """In a forked child about to exec the session's bwrap (see SESSION_IGNORED)."""
    for signum in SESSION_IGNORED:
        _signal.signal(signum, _signal.SIG_IGN)


def session_processes(pid: int) -> list[int]:
    """Every descendant of `pid`: bwrap's, and through it the sandbox's, processes."""
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children", "rb") as handle:
                    children = [int(word) for word in handle.read().split()]
            except OSError:
                continue
            found += children
            queue += children
    return found


def _terminal_told_the_group() -> bool:
    """Whether a Ctrl-C or Ctrl-\\ here came from the terminal to the whole group.

    The launcher then shares the terminal's foreground group with the agent,
    which got the signal itself; forwarding it would deliver it twice.
    """
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


class Forward:
    """The launcher's handler for signals sent to it while the session runs.

    The signal goes to every process of the session: bwrap ignores it
    (SESSION_IGNORED), the agent and its children get it as they would
    without the sandbox. After TERM or a hang-up the agent has GRACE seconds
    to end; then the sandbox is killed, and the status is 128 + the signal.

    As the session starts, bwrap and the inner stage ignore it until the inner stage gives
    the agent the defaults back (enter.c reset_signals): a signal no process takes yet is
    owed, and sent again every RETRY to those that take it by then, until GRACE.
    """

    def __init__(self, pid: int, signals: tuple[int, ...] = SESSION_IGNORED) -> None:
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)  # the grace kill can never hit a reused pid
        self.signalled = 0
        self.owed: dict[int, float] = {}  # signal: until when it is tried again
        self.deadline = 0.0  # the grace kill's time (monotonic), 0 for none
        self.previous = {_signal.SIGALRM: _signal.signal(_signal.SIGALRM, self._tick)}
        self.handle(signals)

    def handle(self, signals: tuple[int, ...]) -> None:
        for signum in signals:
            # TERM or HUP ignored here was inherited so (nohup), the launcher ignores only
            # INT and QUIT itself: kept ignored, as the agent keeps it (run.py).
            if signum in _INHERITABLE and _signal.getsignal(signum) == _signal.SIG_IGN:
                continue
            self.previous.setdefault(signum, _signal.signal(signum, self))

    def __call__(self, signum: int, _frame: object) -> None:
        terminal = signum in (_signal.SIGINT, _signal.SIGQUIT)
        told = terminal and _terminal_told_the_group()  # the agent got it from the terminal
        processes = session_processes(self.pid)
        # Read before the signal is sent: a process that took it would read alike after.
        if not any(takes(pid, signum) for pid in processes):
            self.owed[signum] = time.monotonic() + GRACE
        if not told:
            for pid in (self.pid, *processes):
                try:
                    os.kill(pid, signum)
                except OSError:  # gone meanwhile, or not ours to signal
                    continue
        if not terminal:
            self.signalled = self.signalled or signum
            self.deadline = time.monotonic() + GRACE
        self._arm()

    def _tick(self, _signum: int, _frame: object) -> None:
        now = time.monotonic()
        for signum, until in list(self.owed.items()):
            ready = [pid for pid in session_processes(self.pid) if takes(pid, signum)]
            for pid in ready:
                try:
                    os.kill(pid, signum)
                except OSError:
                    continue
            if ready or now >= until:
                del self.owed[signum]
        if self.deadline and now >= self.deadline:
            self.deadline = 0.0
            try:
                _signal.pidfd_send_signal(self.pidfd, _signal.SIGKILL)
            except OSError:
                pass
        self._arm()

    def _arm(self) -> None:
        """The timer for the next retry of an owed signal, or for the grace kill."""
        now = time.monotonic()
        due = [now + RETRY] if self.owed else []
        if self.deadline:
            due.append(self.deadline)
        _signal.setitimer(_signal.ITIMER_REAL, max(min(due) - now, 1e-4) if due else 0)

    def status(self, code: int) -> int:
        """The shell's form of the session's exit code (negative: a signal)."""
        if self.signalled and code == -_signal.SIGKILL:
            return 128 + self.signalled  # ended by us after the grace: the signal we got
        return 128 - code if code < 0 else code

    def close(self) -> None:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        for signum, handler in self.previous.items():
            _signal.signal(signum, handler)
        os.close(self.pidfd)


def takes(pid: int, signum: int) -> bool:
    """Whether `pid`, a process of the sandbox's pid namespace but its init, does not
    ignore `signum` (it acts on it, or holds it pending): /proc/PID/status, world-readable."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            fields = dict(line.split(b":", 1) for line in handle.read().splitlines()
                          if b":" in line)
        levels = fields[b"NSpid"].split()
        ignored = int(fields[b"SigIgn"], 16)
    except (OSError, KeyError, ValueError):
        return False
    return len(levels) > 1 and levels[-1] != b"1" and not ignored >> (signum - 1) & 1


def pass_stop_on(pid: int) -> None:
    """The agent `pid` stopped: unless a terminal's Ctrl-Z already stopped the whole job
    (its SIGTSTP waits pending, blocked, in this parent), stop the job from here, outside
    the agent's Landlock domain (inside/enter.py, relay_stops, says why)."""
    if _signal.SIGTSTP not in _signal.sigpending() and _still_stopped(pid):
        os.kill(0, _signal.SIGTSTP)  # reaches this parent too: pending, taken below
    _signal.sigtimedwait({_signal.SIGTSTP}, 0)


def _still_stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] == b"T"
    except (OSError, IndexError):
        return False


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (it may belong to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def join_cgroups(dirs: tuple[str, ...]) -> str | None:
    """Move this process into each of `dirs` (its later children follow); None, or why
    it could not, in one line for the refusal: the caps would not hold."""
    for directory in dirs:
        try:
            with open(f"{directory}/cgroup.procs", "wb") as handle:
                handle.write(b"0")  # "0": the writing process
        except OSError as error:
            return (f"claude-sandbox: the launch stops: its cgroup cannot be joined, so "
                    f"max-pids and max-memory would not hold (cannot write to "
                    f"{directory}/cgroup.procs: {error.strerror})")
    return None


def join_or_exit(dirs: tuple[str, ...]) -> None:
    """In a forked child before its exec: join `dirs`, or say why in one line and end
    with EXIT_UNAVAILABLE before anything uncapped runs (jail/tie.c does the same)."""
    why = join_cgroups(dirs)
    if why is not None:
        os.write(2, f"{why}\n".encode())
        os._exit(EXIT_UNAVAILABLE)


def tie_to_parent(parent: int) -> bool:
    """SIGKILL this process when its parent ends (kept across exec); False if the
    kernel refused, or if `parent` is no longer the parent (it died before the prctl)."""
    from claude_sandbox.core.libc import load_libc  # loaded: fork_exec did, before the fork

    if load_libc().prctl(kernel.PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0) != 0:
        return False
    return os.getppid() == parent
