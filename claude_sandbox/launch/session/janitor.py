"""The janitor: what a launcher cannot clean up when it is killed, cleaned up at once.

A SIGKILLed launcher runs no code. Its sandbox dies with it (parent-death
signals), but its files stay: the jail's private directory in /tmp, its cgroup
directories. Every launch sweeps
those of dead launchers first; the janitor makes that immediate instead of
"at the next launch" (docs/explanation/architecture.md, Teardown).

It is spawned by the launcher, in its own session so that neither the
terminal's signals nor a signal to the launcher's process group reach it, and
it waits as `sh` alone (about 1 MiB resident, where a forked interpreter held
6), reading a pipe nothing is written to: its end of file is the launcher's end.
What to clean, the launch tells it on a second pipe as it makes it (core/wire.py's
messages), where it waits unread in the pipe's buffer. After its own teardown the
launcher kills the janitor, which so touches nothing. An end of file on the first
pipe means the launcher died: only then does the janitor start the interpreter
(`_janitor PID`) on the second pipe, which sweeps what that launcher's pid left,
and exits.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # `signal` imports enum
import os
import sys

from claude_sandbox.core import paths, process, wire
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, EXIT_USAGE, SandboxError, no_process

TOLD_LIMIT = 1 << 16  # a pipe's buffer: what the launch can tell without waiting
_ATOMIC = 4096  # PIPE_BUF: a write this long goes into a pipe whole, or not at all


def _pipe() -> tuple[int, int]:
    try:
        return os.pipe()
    except OSError as error:  # EMFILE: a soft limit of a few descriptors (`ulimit -n 8`)
        raise SandboxError(f"cannot open a pipe ({error.strerror}): raise the open-files "
                           "limit (`ulimit -n`)", EXIT_UNAVAILABLE) from None


class Janitor:
    """The launcher's ends of the two pipes."""

    def __init__(self, spawnable: bool) -> None:
        """`spawnable`: the launcher's inherited descriptors are marked close-on-exec
        (process.cloexec_inherited), so that a spawned janitor gets none of them."""
        alive_read, self._alive = _pipe()
        try:
            told_read, self._told = _pipe()
        except SandboxError:
            for fd in (alive_read, self._alive):
                os.close(fd)
            raise
        os.set_blocking(self._told, False)  # a full pipe drops a line, never stops a launch
        try:
            self.pid = _start(alive_read, told_read, os.getpid(), spawnable)
        except OSError as error:
            for fd in (self._alive, self._told):
                os.close(fd)
            raise no_process(error) from None
        finally:
            os.close(alive_read)
            os.close(told_read)

    def tell(self, kind: str, path: str) -> None:
        """What to sweep if the launcher dies: `cgroup`, and a path."""
        message = wire.frame([kind, path])
        if len(message) > _ATOMIC:
            return  # not written in part, which would garble what follows: the next launch
        try:  # sweeps it
            os.write(self._told, message)
        except OSError:  # the janitor could not start, or the pipe is full: the next
            pass  # launch sweeps

    def done(self) -> None:
        """The launcher has torn down itself: the janitor leaves everything alone. It is
        killed before the pipe it waits on closes, so it never reads that as a death."""
        try:
            os.kill(self.pid, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            os.close(self._alive)
            os.close(self._told)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


# Waits for the end of file of stdin, where nothing is written; then runs the sweeper
# ("$@") on descriptor 3, which holds what it was told. Nothing it was told is ever
# part of the script.
_WAIT = """read -r _ || :
exec "$@" <&3
"""


def _start(alive_read: int, told_read: int, launcher: int, spawnable: bool) -> int:
    """Spawn the janitor's `sh`: in its own session, the first pipe on its standard input,
    the second on descriptor 3, /dev/null for the rest, and nothing else of the launcher's.

    posix_spawn, not a fork: glibc's clones without copying the launcher's memory map,
    which a fork copies only for the exec to throw away, and after which the launcher
    takes a page fault on each page it writes (ADR 0004). Only descriptors without
    close-on-exec cross an exec: those the launcher opened are marked so (Python's
    default), and those it inherited are marked so first (`spawnable`, run.py). Above
    all not the jail holder's socket (opened later anyway), nor a descriptor the launcher
    inherited above a soft limit it was started under (check 102). Where /proc could not
    list them, a fork closes them by range (process.close_all_but) before its exec.
    """
    sweeper = [*paths.internal_argv("_janitor"), str(launcher)]
    argv = ["sh", "-c", _WAIT, "janitor", *sweeper]
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    if not spawnable:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            streams = {0: alive_read, 3: told_read, 1: null, 2: null}
            return process.fork_exec([paths.tool("sh"), *argv[1:]], env, streams,
                                     setsid=True, pass_fds=(3,)).pid
        finally:
            os.close(null)
    return os.posix_spawn(paths.tool("sh"), argv, env, file_actions=[
        (os.POSIX_SPAWN_DUP2, alive_read, 0),
        (os.POSIX_SPAWN_DUP2, told_read, 3),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_RDWR, 0),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ], setsid=True, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))


def main(argv: list[str]) -> int:
    """`_janitor PID`: the launcher PID died; sweep what stdin says it made."""
    if len(argv) != 1 or not argv[0].isdigit():
        raise SandboxError("_janitor: expected the dead launcher's pid", EXIT_USAGE)
    told = wire.messages(sys.stdin.buffer.read(TOLD_LIMIT), TOLD_LIMIT)
    sweep(int(argv[0]), [message for message in told if len(message) == 2])
    return 0


def sweep(launcher: int, told: list[list[str]]) -> None:
    """Remove what the dead launcher made: its jail directory and cgroups.

    Its git overlays' upper directories stay in the store: the next launch in that
    workspace keeps them aside unapplied and says where (gitsession.py).
    """
    from claude_sandbox.jail import dirs
    from claude_sandbox.launch.session import cgroups

    dirs.sweep_stale_dirs(dead=launcher)
    # A cgroup can go only once the sandbox's last process has left it. The processes
    # die of their parent-death signals; one that lost its signal (a credential change
    # clears it) is killed here, and remove() waits for them all.
    cgroup = cgroups.Cgroup(tuple(path for kind, path in told if kind == "cgroup"))
    cgroup.kill_members()
    cgroup.remove(timeout=5.0)
