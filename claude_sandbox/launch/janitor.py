"""The janitor: what a launcher cannot clean up when it is killed, cleaned up at once.

A SIGKILLed launcher runs no code. Its sandbox dies with it (parent-death
signals), but its files stay: the placeholders it made in the workspace, the
jail's private directory in /tmp, its cgroup directories. Every launch sweeps
those of dead launchers first; the janitor makes that immediate instead of
"at the next launch" (docs/explanation/architecture.md, Teardown).

It is a forked copy of the launcher (no exec, no import: nothing to pay at
launch but the fork), in its own session so that neither the terminal's
signals nor a signal to the launcher's process group reach it. It reads what
to clean from a pipe as the launch makes it; the launcher writes `done` after
its own teardown, and the janitor then exits without touching anything. An
end of file without `done` means the launcher died: the janitor sweeps what
that launcher's pid left, and exits.
"""

from __future__ import annotations

import os

from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError


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
                _serve(read_end, launcher)
            finally:
                os._exit(0)
        os.close(read_end)

    def tell(self, kind: str, path: str) -> None:
        """What to sweep if the launcher dies: `store` or `cgroup`, and a path."""
        if self._write_end >= 0:
            os.write(self._write_end, f"{kind} {path}\n".encode("utf-8", "surrogateescape"))

    def done(self) -> None:
        """The launcher has torn down itself: the janitor leaves everything alone."""
        if self._write_end < 0:
            return
        try:
            os.write(self._write_end, b"done\n")
        finally:
            os.close(self._write_end)
            self._write_end = -1
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _serve(read_end: int, launcher: int) -> None:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    # Nothing of the launcher's stays open here: above all not the jail
    # holder's socket, whose end of file tells the holder the launcher is gone.
    keep = sorted({0, 1, 2, read_end})
    for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")], strict=True):
        os.closerange(low + 1, high)
    data = b""
    while chunk := _read(read_end):
        data += chunk
    lines = data.decode("utf-8", "surrogateescape").splitlines()
    if "done" in lines:
        return
    sweep(launcher, [line.split(" ", 1) for line in lines if " " in line])


def _read(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, 65536)
        except InterruptedError:
            continue


def sweep(launcher: int, told: list[list[str]]) -> None:
    """Remove what the dead launcher made: its placeholders, jail directory and cgroups."""
    from claude_sandbox.jail import dirs
    from claude_sandbox.launch import cgroups, placeholders

    for kind, path in told:
        if kind == "store":
            placeholders.sweep(path, dead=launcher)
    dirs.sweep_stale_dirs(dead=launcher)
    # A cgroup can go only once the sandbox's last process has left it: the
    # processes die of their parent-death signals, and remove() waits for that.
    cgroups.Cgroup(tuple(path for kind, path in told if kind == "cgroup")).remove(timeout=5.0)
