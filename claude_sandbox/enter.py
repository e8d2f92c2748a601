"""`_enter`: the last step inside bwrap, between the sandbox and the agent.

bwrap execs `INTERPRETER -I -m claude_sandbox _enter ARGS -- AGENT_ARGV...`.
This module then sets the in-sandbox rlimits, enters the Landlock domain
(it must be entered inside bwrap: a process in a domain cannot run bwrap),
and execs the agent. The seccomp filter is already in force (bwrap loaded it
before exec), and everything here is inherited by the agent and every
descendant, none of it removable.

It runs at every launch in a fresh interpreter, so it imports little:
`landlock` (ctypes), `resource`, `collections`. Not `typing`, not
`dataclasses` (about 35 ms together on this machine, more than everything
else `_enter` does); the launcher-side half (KernelSettings, enter_argv,
describe) lives in limits.py.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # `signal` imports enum
import os
import resource
from collections import namedtuple

from . import landlock
from .errors import EXIT_UNAVAILABLE, EXIT_USAGE, SandboxError

TYPE_CHECKING = False  # typing and dataclasses cost ~35 ms at every launch: not here
if TYPE_CHECKING:
    from typing import NoReturn

LEVELS = ("standard", "harsh")

# The parsed options: the same field names as limits.KernelSettings.
# Ctrl-C, Ctrl-\\, hang-up and TERM: ignored by bwrap so that the agent decides
# (process.SESSION_IGNORED); kept ignored for the agent only where the launch
# itself inherited them ignored (`--keep-ignored int,quit,hup,term`).
_TERMINAL_SIGNALS = {"int": signal.SIGINT, "quit": signal.SIGQUIT, "hup": signal.SIGHUP,
                     "term": signal.SIGTERM}

Entry = namedtuple(
    "Entry", "level max_pids max_memory writable exec_files keep_ignored hide_outer_proc"
)


def _names(value: str) -> list[str]:
    return [name for name in value.split(",") if name]


def parse(argv: list[str]) -> tuple[Entry, list[str]]:
    """Inverse of `enter_argv` plus the agent argv after `--`."""
    if "--" not in argv:
        raise SandboxError("_enter: missing `--` before the agent's argv", EXIT_USAGE)
    split = argv.index("--")
    head, agent = argv[:split], argv[split + 1 :]
    if len(head) % 2:
        raise SandboxError(f"_enter: option without a value in {head!r}", EXIT_USAGE)
    level, nproc, data, keep_ignored, hide = "standard", None, None, (), None
    writable: list[str] = []
    exec_files: list[str] = []
    for flag, value in zip(head[::2], head[1::2], strict=True):
        try:
            if flag == "--level" and value in LEVELS:
                level = value
            elif flag == "--keep-ignored" and set(_names(value)) <= _TERMINAL_SIGNALS.keys():
                keep_ignored = tuple(_TERMINAL_SIGNALS[name] for name in _names(value))
            elif flag == "--nproc":
                nproc = int(value)
            elif flag == "--data":
                data = int(value)
            elif flag == "--writable" and value.startswith("/"):
                writable.append(value)
            elif flag == "--exec-file" and value.startswith("/"):
                exec_files.append(value)
            elif flag == "--hide-outer-proc":
                hide = int(value)
            else:
                raise ValueError
        except ValueError:
            raise SandboxError(f"_enter: bad option {flag} {value!r}", EXIT_USAGE) from None
    if not agent or not agent[0].startswith("/"):
        raise SandboxError("_enter: the agent must be named by absolute path", EXIT_USAGE)
    entry = Entry(level, nproc, data, tuple(writable), tuple(exec_files), keep_ignored, hide)
    return entry, agent


def apply_rlimits(settings: Entry) -> None:
    # Soft = hard: with every capability dropped the agent cannot raise them.
    caps = [(resource.RLIMIT_CORE, 0)]  # no core files: they would hold the agent's secrets
    if settings.max_pids is not None:
        caps.append((resource.RLIMIT_NPROC, settings.max_pids))
    if settings.max_memory is not None:
        caps.append((resource.RLIMIT_DATA, settings.max_memory))
    for which, value in caps:
        try:
            resource.setrlimit(which, (value, value))
        except (OSError, ValueError) as exc:
            raise SandboxError(f"_enter: cannot set rlimit: {exc}", EXIT_UNAVAILABLE) from None


def reset_signals(keep_ignored: tuple[int, ...]) -> None:
    """Hand the agent the signal dispositions it would have had without us.

    Ignored dispositions survive exec. Python ignores SIGPIPE and SIGXFSZ at start,
    and bwrap ignores SIGINT, SIGQUIT, SIGHUP and SIGTERM so that they reach the
    agent without killing bwrap (and with it, through --die-with-parent, the
    sandbox). Those stay ignored only if the launch itself inherited them ignored.
    """
    restore = [signal.SIGPIPE, signal.SIGXFSZ]
    restore += [s for s in _TERMINAL_SIGNALS.values() if s not in keep_ignored]
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
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTSTP})
    while True:
        try:
            pid, status = os.waitpid(-1, os.WUNTRACED)
        except ChildProcessError:
            os._exit(0)
        if os.WIFSTOPPED(status):
            if signal.SIGTSTP not in signal.sigpending() and _still_stopped(pid):
                os.kill(0, signal.SIGTSTP)  # reaches this parent too: pending, taken below
            signal.sigtimedwait({signal.SIGTSTP}, 0)
            continue
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else code)


def _still_stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] == b"T"
    except (OSError, IndexError):
        return False


def main(argv: list[str]) -> NoReturn:
    """`argv` is everything after `_enter`."""
    settings, agent = parse(argv)
    if settings.hide_outer_proc is not None:
        from . import procmask  # only where the outer /proc is bound

        procmask.request_hiding(settings.hide_outer_proc)
    reset_signals(settings.keep_ignored)
    apply_rlimits(settings)
    if os.isatty(0) and os.fork() != 0:
        relay_stops()
    landlock.enter(settings.level, settings.writable, settings.exec_files)
    try:
        os.execv(agent[0], agent)
    except OSError as exc:
        raise SandboxError(f"cannot run {agent[0]}: {exc.strerror}", EXIT_UNAVAILABLE) from None
