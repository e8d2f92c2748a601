"""The janitor: what a launcher cannot clean up when it is killed, cleaned up at once.

A SIGKILLed launcher runs no code. Its sandbox dies with it (parent-death
signals), but its files stay: the jail's private directory in /tmp, its cgroup
directories. Every launch sweeps
those of dead launchers first; the janitor makes that immediate instead of
"at the next launch" (docs/explanation/architecture.md, Teardown).

It is forked from the launcher, in its own session so that neither the
terminal's signals nor a signal to the launcher's process group reach it, and
it waits as `sh` and `cat` (about 2 MiB resident, where a forked interpreter
held 6): `cat` collects, from a pipe, what to clean as the launch makes it.
The launcher writes `done` after its own teardown, and the janitor then exits
without touching anything. An end of file without `done` means the launcher
died: only then does the janitor start the interpreter (`_janitor PID`),
which sweeps what that launcher's pid left, and exits.
"""

from __future__ import annotations

import os
import sys

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, EXIT_USAGE, SandboxError


class Janitor:
    """The launcher's end of the pipe."""

    def __init__(self) -> None:
        read_end, self._write_end = os.pipe()
        launcher = os.getpid()
        try:
            self.pid = os.fork()
        except OSError as error:
            os.close(read_end)
            os.close(self._write_end)
            raise SandboxError(f"cannot start a process ({error.strerror}): the user's "
                               "process limit is reached", EXIT_UNAVAILABLE) from None
        if self.pid == 0:
            try:
                os.close(self._write_end)
                _wait(read_end, launcher)
            finally:
                os._exit(0)
        os.close(read_end)

    def tell(self, kind: str, path: str) -> None:
        """What to sweep if the launcher dies: `cgroup`, and a path."""
        try:
            os.write(self._write_end, f"{kind} {path}\n".encode("utf-8", "surrogateescape"))
        except BrokenPipeError:  # the janitor could not start: the next launch sweeps
            pass

    def done(self) -> None:
        """The launcher has torn down itself: the janitor leaves everything alone."""
        try:
            os.write(self._write_end, b"done\n")
        except BrokenPipeError:
            pass
        finally:
            os.close(self._write_end)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


# Waits for the end of the pipe (stdin); exits at once when the launcher said `done`,
# else hands what it was told to the interpreter ("$@"). The data is never part of
# the script: it travels on stdin.
_WAIT = """data=$(cat)
case "
$data
" in
*"
done
"*) exit 0 ;;
esac
printf '%s\\n' "$data" | exec "$@"
"""


def _wait(read_end: int, launcher: int) -> None:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(read_end, 0)
    for fd in (1, 2):
        os.dup2(null, fd)
    # Nothing of the launcher's stays open here: above all not the jail
    # holder's socket, whose end of file tells the holder the launcher is gone.
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    sweeper = [*paths.internal_argv("_janitor"), str(launcher)]
    os.execve(paths.tool("sh"), ["sh", "-c", _WAIT, "janitor", *sweeper],
              {"PATH": "/usr/bin:/bin", "LC_ALL": "C"})


def main(argv: list[str]) -> int:
    """`_janitor PID`: the launcher PID died; sweep what stdin says it made."""
    if len(argv) != 1 or not argv[0].isdigit():
        raise SandboxError("_janitor: expected the dead launcher's pid", EXIT_USAGE)
    data = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    sweep(int(argv[0]), [line.split(" ", 1) for line in data.splitlines() if " " in line])
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
