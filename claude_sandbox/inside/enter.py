"""`_enter`: the last step inside bwrap, between the sandbox and the agent, under harsh and
brokered (at standard, inside/enter.c does the same in a static program: ADR 0017; this
module then runs only where the installer could not build it).

bwrap execs `INTERPRETER -I -S -c CODE FD` (paths.internal_argv), where FD holds the
plan's inner record (spec.py: validated on read). This module then sets the
in-sandbox rlimits, enters the Landlock domain (it must be entered inside
bwrap: a process in a domain cannot run bwrap), and execs the agent. The
seccomp filter is already in force (bwrap loaded it before exec), and
everything here is inherited by the agent and every descendant, none of it
removable.

It runs at every launch it serves in a fresh interpreter, so it imports little:
`landlock` (ctypes), `resource`, `spec`. Not `typing`, not `dataclasses`
(about 35 ms together on this machine, more than everything else `_enter`
does). The launcher-side half, the record's making, is launch/planner/plan.py.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # `signal` imports enum
import os
import resource

from claude_sandbox.core.errors import EXIT_UNAVAILABLE, EXIT_USAGE, SandboxError
from claude_sandbox.inside import landlock, spec
from claude_sandbox.inside.spec import Inner

TYPE_CHECKING = False  # typing and dataclasses cost ~35 ms at every launch: not here
if TYPE_CHECKING:
    from typing import NoReturn


def parse(argv: list[str]) -> int:
    """`_enter FD`: the descriptor holding the plan's inner record (spec.py)."""
    if len(argv) != 1 or not argv[0].isascii() or not argv[0].isdigit() or len(argv[0]) > 9:
        raise SandboxError("_enter: expected one argument, the plan's descriptor", EXIT_USAGE)
    return int(argv[0])


def apply_rlimits(settings: Inner) -> None:
    # Soft = hard: with every capability dropped the agent cannot raise them.
    caps = [(resource.RLIMIT_CORE, 0)]  # no core files: they would hold the agent's secrets
    if settings.max_pids is not None:
        caps.append((resource.RLIMIT_NPROC, settings.max_pids))
    if settings.max_memory is not None:
        caps.append((resource.RLIMIT_DATA, settings.max_memory))
    for which, value in caps:
        try:
            resource.setrlimit(which, (value, value))
        except (OSError, ValueError, OverflowError) as exc:
            raise SandboxError(f"_enter: cannot set rlimit: {exc}", EXIT_UNAVAILABLE) from None


def reset_signals(keep_ignored: tuple[str, ...]) -> None:
    """Hand the agent the signal dispositions it would have had without us.

    Ignored dispositions survive exec. Python ignores SIGPIPE and SIGXFSZ at start,
    and bwrap ignores SIGINT, SIGQUIT, SIGHUP and SIGTERM so that they reach the
    agent without killing bwrap (and with it, through --die-with-parent, the
    sandbox). Those stay ignored only if the launch itself inherited them ignored.
    """
    restore = [signal.SIGPIPE, signal.SIGXFSZ]
    restore += [s for name, s in spec.TERMINAL_SIGNALS.items() if name not in keep_ignored]
    for signum in restore:
        signal.signal(signum, signal.SIG_DFL)


def relay_stops() -> NoReturn:
    """Stay as the agent's parent, outside its Landlock domain, and pass its Ctrl-Z on.

    An agent that suspends itself in raw mode (Claude Code: `kill(0, SIGTSTP)`)
    stops only what its domain may signal (Landlock's signal scope): itself,
    not bwrap or the launcher, so the shell never gets the terminal back. This
    parent sees the stop and sends the same stop to the whole job from outside
    the domain; `fg` then continues every process of it, the agent included.
    It ignores what the launcher forwards to the agent, and exits with the
    agent's status.

    A Ctrl-Z from the terminal stops the whole job by itself, and sends this
    parent a SIGTSTP too (blocked here, so it waits as pending); the agent's
    own stop never reaches it (the domain's scope). A pending SIGTSTP thus
    tells the two apart, with no race against an `fg` that follows at once.
    """
    for signum in spec.TERMINAL_SIGNALS.values():
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTSTP})
    # Imported here, on a terminal only (0.4 ms), once a Ctrl-Z can only wait as pending.
    from claude_sandbox.core.process import pass_stop_on
    while True:
        try:
            pid, status = os.waitpid(-1, os.WUNTRACED)
        except ChildProcessError:
            os._exit(0)
        if os.WIFSTOPPED(status):
            pass_stop_on(pid)
            continue
        code = os.waitstatus_to_exitcode(status)
        _say_left_behind()
        os._exit(128 - code if code < 0 else code)


def _say_left_behind() -> None:
    """One line naming what the agent started and left running: it ends with the session
    (the sandbox's pid namespace goes), and would otherwise end silently."""
    def status(pid: str) -> dict[str, str]:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            return dict(line.split(":", 1) for line in handle if ":" in line)

    try:
        entries = os.listdir("/proc")
        depth = len(status("self").get("NSpid", "").split())
    except OSError:
        return
    own, names = str(os.getpid()), []
    for pid in entries:
        if not pid.isdigit():
            continue
        try:
            fields = status(pid)
        except OSError:
            continue
        # The sandbox's own pid namespace only, at this process's depth (where the outer
        # /proc is bound, outer processes sit higher), neither its pid 1 (bwrap's) nor
        # this process (the last NSpid is the number in the sandbox's own namespace).
        nspid = fields.get("NSpid", "").split()
        if len(nspid) == depth and nspid[-1] not in ("1", own):
            names.append(fields.get("Name", "?").strip())
    if names:
        shown = ", ".join(sorted(set(names))[:5])
        os.write(2, f"claude-sandbox: {len(names)} process(es) the agent left running end "
                    f"with the session ({shown})\n".encode())


def restore_environment() -> None:
    """Give os.environ back what bwrap set, as the kernel keeps it in /proc/self/environ:
    where the locale was C, the interpreter set LC_CTYPE=C.UTF-8 at start (PEP 538),
    which the agent, and the brokered agent and its commands, would inherit. The agent
    gets the plan's environment exactly, as under the compiled stage."""
    try:
        with open("/proc/self/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return  # no /proc (the plan always mounts one): the interpreter's additions stay
    given: dict[bytes, bytes] = {}
    for entry in entries:
        name, equals, value = entry.partition(b"=")
        if name and equals:  # the first of a name, as the C library and Python take it
            given.setdefault(name, value)
    for name in [name for name in os.environb if name not in given]:
        del os.environb[name]
    for name, value in given.items():
        if os.environb.get(name) != value:
            os.environb[name] = value


def main(argv: list[str]) -> NoReturn:
    """`argv` is everything after `_enter`: the descriptor of the inner record."""
    settings, helper_fd = spec.read(parse(argv))
    if helper_fd is not None:
        from claude_sandbox.inside import prochide  # only where the outer /proc is bound

        prochide.request_hiding(helper_fd)
    restore_environment()
    reset_signals(settings.keep_ignored)
    apply_rlimits(settings)
    if settings.level == "brokered":  # the agent in a child; a command server here
        from claude_sandbox.inside import broker

        broker.run(settings, os.isatty(0))
    if os.isatty(0) and os.fork() != 0:
        relay_stops()
    landlock.enter(settings.level, settings.writable, settings.exec_files)
    agent = settings.command
    try:
        os.execv(agent[0], agent)
    except OSError as exc:
        raise SandboxError(f"cannot run {agent[0]}: {exc.strerror}", EXIT_UNAVAILABLE) from None
