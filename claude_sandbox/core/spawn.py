"""Starting programs without a fork: a fork copies the starting process's page tables
and write-protects all of its memory, so that each page it writes afterwards faults
once more (docs/adr/0004-launch-cost.md). glibc's posix_spawn shares the memory until
the exec instead. It leaves glibc's two internal signals ignored in the program, and a
program started so cannot run code of ours before its exec: each form here says what
stands in for that (process.fork_exec is the form with a fork). `capture` runs a tool
whose answer is read (git's), spawned once the launcher has marked what it inherited.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum
import os
import select
import time

from claude_sandbox.core import paths
from claude_sandbox.core.process import Child, fork_exec, inherited_marked, join_or_exit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def spawn_tied(argv: Sequence[str], env: Mapping[str, str], streams: Mapping[int, int],
               cgroup_dirs: tuple[str, ...] = ()) -> Child:
    """Start a program of the jail that must end with this process (pasta, an outside
    relay): in a session of its own, with `streams` (target fd: source fd) in place of 0,
    1, 2, nothing else inherited, in the launch's cgroup (`cgroup_dirs`), and killed by
    the kernel when this process ends, even by SIGKILL (check 49).

    Through the tie program (jail/tie.c), posix_spawned: a fork would copy this
    process's page tables and write-protect its memory, so that each page it writes
    afterwards faults once more (about 230 faults and 1.4 ms of the launcher's CPU at
    pasta's start, measured; docs/adr/0004-launch-cost.md). Where the tie program is not
    installed, a fork sets the same (fork_exec). Not for a program in the agent's line
    either way: spawn_tool's docstring.
    """
    if not installed_program(paths.TIE):
        return fork_exec(argv, env, streams, setsid=True, die_with_parent=True,
                         before_exec=(lambda: join_or_exit(cgroup_dirs)) if cgroup_dirs else None)
    return posix_spawned([paths.TIE, str(os.getpid()), *cgroup_dirs, "--", *argv], env,
                         streams, setsid=True)


def installed_program(path: str) -> bool:
    """Whether `path` is a program the installer placed, and so one a launch may run
    as its user, root included: a regular file, not a link, that no one but root could
    have put there (paths.root_owned: it and every directory above it root's, writable
    by no one else), and that this user may execute (one an operator made 0700 is
    passed over, not a launch refused)."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (info.st_mode & 0o170000 == 0o100000 and paths.root_owned(path)
            and os.access(path, os.X_OK))


def spawn_tool(argv: Sequence[str], env: Mapping[str, str], streams: Mapping[int, int],
               setsid: bool) -> Child:
    """Start a short-lived tool of ours (iptables, an inside relay) from the jail's
    holder, with `streams` (target fd: source fd) in place of 0, 1, 2.

    posix_spawn, where fork_exec forks: a fork copies the memory map (the holder's is the
    launcher's) only for the exec to throw it away; glibc's posix_spawn clones without
    copying it (about 1 ms of CPU a tool, measured). It leaves glibc's two internal
    signals ignored in the tool (fork_exec's docstring), and they stay so in whatever the
    tool execs (iptables through `sh -c`, socat through setpriv), none of which is ever
    in the agent's line: never use this for a program that leads to the agent.
    Every other descriptor is closed by its close-on-exec flag: the holder closed all it
    inherited (holderfork.forked), and opens its own close-on-exec.
    """
    return posix_spawned(argv, env, streams, setsid=setsid)


def posix_spawned(argv: Sequence[str], env: Mapping[str, str], streams: Mapping[int, int],
                  *, setsid: bool) -> Child:
    """`argv` started by glibc's posix_spawn, with `streams` (target fd: source fd) in place
    of 0, 1, 2 and SIGPIPE and SIGXFSZ at their defaults; every other descriptor it gets
    is one without close-on-exec (a caller's to rule out). The memory is shared until the
    exec, not copied (fork_exec's cost: docs/adr/0004-launch-cost.md), and glibc's two
    internal signals stay ignored in the program (fork_exec's docstring): never for a
    program in the agent's line."""
    actions = [(os.POSIX_SPAWN_DUP2, source, target) for target, source in streams.items()]
    return Child(os.posix_spawn(argv[0], list(argv), dict(env), file_actions=actions,
                                setsid=setsid, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ)))


def capture(argv: list[str], env: dict[str, str], *, stdin: int | None = None,
            timeout: float = 5.0, limit: int = 1 << 30) -> tuple[int, str]:
    """Run `argv` with stdin from the descriptor `stdin` (/dev/null if None); (exit status,
    stdout). Status -1: it hung (past `timeout` seconds) or wrote more than `limit` bytes
    (it is killed: the answer is not read into memory whatever its size).

    stderr is discarded: the callers want an answer, not the tool's diagnostics.
    """
    read_end, write_end = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    streams = {0: null if stdin is None else stdin, 1: write_end, 2: null}
    try:
        # Spawned where every inherited descriptor is close-on-exec (the launcher marks
        # them at its start): git's config read forked a process the launcher's size, 2 ms
        # of a launch and a fault on each page it wrote afterwards. Forked otherwise, so
        # that the child closes what it inherited.
        child = (posix_spawned(argv, env, streams, setsid=False) if inherited_marked()
                 else fork_exec(argv, env, streams, setsid=False))
    except OSError:  # not started (no such program, no fork): as a failed exec ends
        os.close(read_end)
        return 127, ""
    finally:
        os.close(write_end)
        os.close(null)
    chunks = []
    size = 0
    deadline = time.monotonic() + timeout
    os.set_blocking(read_end, False)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                child.kill()
                child.wait()
                return -1, ""
            ready, _, _ = select.select([read_end], [], [], left)
            if not ready:
                continue
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                child.kill()
                child.wait()
                return -1, ""
    finally:
        os.close(read_end)
    return child.wait(), b"".join(chunks).decode("utf-8", "surrogateescape")
