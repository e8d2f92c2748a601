"""Starting programs without a fork: a fork copies the starting process's page tables
and write-protects all of its memory, so that each page it writes afterwards faults
once more (docs/adr/0004-launch-cost.md). glibc's posix_spawn shares the memory until
the exec instead. It leaves glibc's two internal signals ignored in the program, and a
program started so cannot run code of ours before its exec: each form here says what
stands in for that (process.fork_exec is the form with a fork).
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.core.process import Child, fork_exec, join_or_exit, posix_spawned

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
