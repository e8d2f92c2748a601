"""The launch's cgroup: probed, made, joined and removed (limits.py decides what goes in it).

A child cgroup below the launcher's own holds the sandbox's pids and memory
caps where the kernel delegates one. Only a process that outlives the sandbox
can remove it, once its last process is gone: the waiting launcher (the jail's
parent, or `limits.run_supervised`). It is named after the launcher's pid so
that the janitor (janitor.py) and the next launch can remove one a killed
launcher left behind.
"""

from __future__ import annotations

import os
import sys
import time

from claude_sandbox.core import kernel, libc
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.process import join_or_exit, pid_alive
from claude_sandbox.core.record import record

CGROUP_ROOT = "/sys/fs/cgroup"
_PREFIX = "claude-sandbox-"  # and the launcher's pid


@record
class CgroupFacts:
    """Writable cgroup directories the launcher may make children in ("" = none),
    and the limits the launcher already lives under (0: none found)."""

    v2: str = ""  # a v2 directory whose subtree_control enables pids and memory
    v1_pids: str = ""
    v1_memory: str = ""
    pids_limit: int = 0  # the tightest pids.max above us, or RLIMIT_NPROC
    memory_limit: int = 0  # the tightest memory limit above us, or MemTotal
    nproc: int = 0  # a user's own soft RLIMIT_NPROC (0: none, or root, whom it never holds)


@record
class CgroupWrite:
    base: str  # the parent directory; the child is base/claude-sandbox-PID
    file: str
    value: str
    optional: bool = False  # written only where the kernel has the file (swap accounting)


def _own_cgroup(controller: str, proc_cgroup: str) -> str | None:
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def probe_cgroups() -> CgroupFacts:
    """Find writable cgroup directories under this process's own cgroups."""
    with open("/proc/self/cgroup", encoding="utf-8") as f:
        proc_cgroup = f.read()

    def usable(directory: str) -> str:
        return directory if os.access(directory, os.W_OK | os.X_OK) else ""

    v2 = ""
    own = _own_cgroup("", proc_cgroup)
    for mount in (CGROUP_ROOT, f"{CGROUP_ROOT}/unified"):
        if own is None or not os.path.exists(f"{mount}/cgroup.controllers"):
            continue
        directory = os.path.normpath(mount + own)
        try:
            with open(f"{directory}/cgroup.subtree_control", encoding="utf-8") as f:
                enabled = f.read().split()
        except OSError:
            continue
        if "pids" in enabled and "memory" in enabled:
            v2 = usable(directory)
        break
    v1 = {}
    for controller in ("pids", "memory"):
        own_v1 = _own_cgroup(controller, proc_cgroup)
        hierarchy = f"{CGROUP_ROOT}/{controller}"
        v1[controller] = (
            usable(os.path.normpath(hierarchy + own_v1))
            if own_v1 and os.path.exists(f"{hierarchy}/cgroup.procs")
            else ""
        )
    soft = _soft_limit(kernel.RLIMIT_NPROC)
    nproc = soft if soft != kernel.RLIM_INFINITY and os.getuid() != 0 else 0
    return CgroupFacts(v2, v1["pids"], v1["memory"], _pids_limit(proc_cgroup, nproc),
                       _memory_limit(proc_cgroup), nproc)


def _number(path: str) -> int:
    """A cgroup limit file's value; 0 for "max", absent or unreadable."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def _ancestors(mount: str, own: str | None) -> list[str]:
    if own is None:
        return []
    path = os.path.normpath(mount + own)
    found = []
    while path.startswith(mount):
        found.append(path)
        if path == mount:
            break
        path = os.path.dirname(path)
    return found


def _tightest(values: list[int]) -> int:
    positive = [v for v in values if v > 0]
    return min(positive) if positive else 0


def _pids_limit(proc_cgroup: str, nproc: int) -> int:
    """The tightest pids.max above us, or `nproc`, a user's own soft RLIMIT_NPROC."""
    values = [_number(f"{d}/pids.max") for d in
              _ancestors(CGROUP_ROOT, _own_cgroup("", proc_cgroup)) +
              _ancestors(f"{CGROUP_ROOT}/pids", _own_cgroup("pids", proc_cgroup))]
    return _tightest([*values, nproc] if nproc else values)


def _soft_limit(resource: int) -> int:
    """getrlimit's soft limit, through libc: the resource module's extension would be
    loaded at every launch for this one call (ADR 0004)."""
    limits = libc.string_buffer(b"", 16)  # struct rlimit: rlim_cur, rlim_max
    if libc.load_libc().getrlimit(resource, limits) != 0:
        return kernel.RLIM_INFINITY  # not known: no cap from it
    return int.from_bytes(limits.raw[:8], sys.byteorder)


def _memory_limit(proc_cgroup: str) -> int:
    values = [_number(f"{d}/memory.max") for d in
              _ancestors(CGROUP_ROOT, _own_cgroup("", proc_cgroup))]
    values += [_number(f"{d}/memory.limit_in_bytes") for d in
               _ancestors(f"{CGROUP_ROOT}/memory", _own_cgroup("memory", proc_cgroup))]
    try:
        with open("/proc/meminfo", "rb") as handle:
            for line in handle:
                if line.startswith(b"MemTotal:"):
                    values.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError):
        pass
    # v1 reports "no limit" as a huge number, not "max".
    return _tightest([v for v in values if v < 1 << 60])


@record
class Cgroup:
    """The per-launch cgroup directories; one per hierarchy in the plan."""

    dirs: tuple[str, ...]

    def join(self) -> None:
        """Move this process in; its later children follow. Run in the forked child that
        execs the sandbox's first process (fork_exec's before_exec): a child whose move
        fails says why in one line and ends with EXIT_UNAVAILABLE, before it runs
        anything uncapped."""
        join_or_exit(self.dirs)

    def kill_members(self) -> None:
        """SIGKILL every process still in the directories, for a launcher that died: its
        sandbox must not outlive it even where a parent-death signal was lost (the kernel
        clears it when a process's credentials change, and bwrap re-arms it only later).
        Each pid is taken by a pidfd and then found in the directory again, so the process
        signalled is the member, not a later one with its number."""
        import _signal  # type: ignore[import-not-found]

        for directory in self.dirs:
            for pid in _members(directory):
                try:
                    pidfd = os.pidfd_open(pid)
                except OSError:
                    continue
                try:
                    if pid in _members(directory):
                        _signal.pidfd_send_signal(pidfd, _signal.SIGKILL)
                except OSError:
                    pass
                finally:
                    os.close(pidfd)

    def events(self) -> dict[str, int]:
        """What the caps did, read before the directories go: processes the memory cap
        killed (v2 memory.events, v1 memory.oom_control: oom_kill) and forks the pids cap
        refused (pids.events: max)."""
        found = {"oom_kill": 0, "pids_max": 0}
        for directory in self.dirs:
            for name, key, field in (("memory.events", "oom_kill", "oom_kill"),
                                     ("memory.oom_control", "oom_kill", "oom_kill"),
                                     ("pids.events", "pids_max", "max")):
                try:
                    with open(os.path.join(directory, name), "rb") as handle:
                        for line in handle:
                            words = line.decode("ascii").split()
                            if len(words) == 2 and words[0] == field and words[1].isdigit():
                                found[key] += int(words[1])
                except (OSError, ValueError):  # ValueError: not ASCII, no count read
                    continue
        return found

    def remove(self, timeout: float = 2.0) -> list[str]:
        """rmdir every directory; retry while exiting tasks drain. Returns leftovers."""
        deadline = time.monotonic() + timeout
        left = list(self.dirs)
        pause = 0.0005
        while True:
            for directory in list(left):
                try:
                    os.rmdir(directory)
                except FileNotFoundError:
                    pass
                except OSError:
                    continue
                left.remove(directory)
            if not left or time.monotonic() > deadline:
                return left
            # Tasks that just exited leave within a millisecond or two: wait that long
            # first, then longer (a fixed 10 ms made every root launch 10 ms longer).
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def _members(directory: str) -> list[int]:
    try:
        with open(f"{directory}/cgroup.procs", "rb") as handle:
            return [int(line) for line in handle.read().split()]
    except (OSError, ValueError):
        return []


def _write(path: str, value: str) -> None:
    try:
        with open(path, "wb") as f:
            f.write(value.encode("ascii"))
    except OSError as exc:
        raise SandboxError(
            f"cannot write {value!r} to {path}: {exc.strerror}", EXIT_UNAVAILABLE
        ) from None


def sweep_stale(base: str) -> None:
    """Remove directories whose launcher died without cleaning up (SIGKILL)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        pid = name[len(_PREFIX):] if name.startswith(_PREFIX) else ""
        if pid.isascii() and pid.isdigit() and not pid_alive(int(pid)):
            try:
                os.rmdir(os.path.join(base, name))
            except OSError:
                pass  # still populated or already gone: a later launch retries


def create(writes: tuple[CgroupWrite, ...]) -> Cgroup | None:
    """Make the per-launch cgroup(s), named after this launcher, and write the caps; None
    when there are none."""
    if not writes:
        return None
    name = f"{_PREFIX}{os.getpid()}"
    made = Cgroup(())
    try:
        for write in writes:
            directory = os.path.join(write.base, name)
            if directory not in made.dirs:
                sweep_stale(write.base)
                os.mkdir(directory, 0o755)
                made = Cgroup((*made.dirs, directory))
            target = f"{directory}/{write.file}"
            if write.optional and not os.path.exists(target):
                continue
            _write(target, write.value)
    except (OSError, SandboxError) as exc:
        made.remove()
        if isinstance(exc, OSError):
            raise SandboxError(f"cannot create cgroup {name}: {exc.strerror}",
                               EXIT_UNAVAILABLE) from None
        raise
    return made


# The processes a launch still starts once the launcher and the janitor run (counted among
# the user's tasks then), measured: bwrap's monitor, its init and the session's first
# process; with the jail pasta and the egress proxy too (the holder becomes the monitor).
LAUNCH_PROCESSES = {True: 5, False: 3}
_COUNTED_BELOW = 1024  # a soft limit this high leaves room: the user's tasks are not counted


def refuse_without_room(jailed: bool) -> None:
    """Refuse, in one line, a launch the user's soft RLIMIT_NPROC leaves too few processes
    for: it would fail later at a fork of bwrap's, whose own message reaches the user. The
    kernel counts a user's tasks, threads included; root is never held by the limit."""
    soft = _soft_limit(kernel.RLIMIT_NPROC)
    if os.getuid() == 0 or soft >= _COUNTED_BELOW:  # RLIM_INFINITY is above it too
        return
    used = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == os.getuid():
                    used += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                continue  # gone meanwhile, or hidden (hidepid): counted by the kernel alone
    needed = LAUNCH_PROCESSES[jailed]
    if soft - used < needed:
        raise SandboxError(
            f"the user's process limit leaves {max(soft - used, 0)} more processes ({used} of "
            f"`ulimit -u` {soft} in use), and a launch starts {needed}: raise the limit, or "
            "end some of this user's processes", EXIT_UNAVAILABLE)


# Descriptors a launch holds at once, measured: pasta opens a pool of sockets at its start
# and failed under 96 (`ulimit -n`); without the jail the launcher ran under 16.
LAUNCH_FILES = {True: 128, False: 32}


def refuse_without_files(jailed: bool) -> None:
    """Refuse, in one line, a launch the soft RLIMIT_NOFILE is too low for: it would fail
    at whichever descriptor came last, a traceback of ours or pasta's "PID file open"."""
    soft = _soft_limit(kernel.RLIMIT_NOFILE)
    needed = LAUNCH_FILES[jailed]
    if soft < needed:
        raise SandboxError(f"the open-files limit (`ulimit -n`) is {soft}, and a launch needs "
                           f"{needed}{' (pasta opens a pool of sockets)' if jailed else ''}: "
                           "raise it", EXIT_UNAVAILABLE)
