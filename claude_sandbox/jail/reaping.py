"""The launcher's hold on what a jailed launch started: not dumpable, a subreaper,
and the reaping and killing at teardown (docs/explanation/egress-jail.md).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import os
import select
import time

from claude_sandbox.core import kernel
from claude_sandbox.core.errors import jail_error
from claude_sandbox.core.libc import byref, c_int, load_libc

KILL_WAIT = 2.0
# How many scans kill_namespace makes at most: each kills what the last one could not
# see yet; two suffice unless something forks as fast as it is killed.
KILL_PASSES = 8


def set_not_dumpable() -> None:
    """The waiting parent holds the jail's control socket: keep same-user
    processes (the agent included) out of its memory and descriptors (egress-jail.md, Channels)."""
    if load_libc().prctl(kernel.PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise jail_error("cannot mark the launcher not dumpable")


def become_subreaper() -> bool:
    """Adopt what outlives its own parent; whether this process was a subreaper already.

    From before the holder's fork (start.begin): what the holder started when it dies
    in set-up (a tool, a child killed before its exec), the inside relays (their parent,
    the holder, becomes bwrap and exits before them) and bwrap's init (bwrap exits as
    soon as the sandbox reports the command's status, before its init has exited).
    Reparented here, the teardown reaps them; otherwise, in a container without an init
    that reaps, they stay zombies.
    """
    libc = load_libc()
    before = c_int(0)
    libc.prctl(kernel.PR_GET_CHILD_SUBREAPER, byref(before), 0, 0, 0)
    if libc.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise jail_error("cannot adopt the launch's orphans (subreaper)")
    return bool(before.value)


def stop_being_subreaper() -> None:
    load_libc().prctl(kernel.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


class Ignoring:
    """contextlib.suppress, without importing contextlib: it brings functools and
    collections, which nothing else of a launch needs (about 3 ms of the launcher's
    start, docs/adr/0004-launch-cost.md). The named errors end the block quietly."""

    def __init__(self, *kinds: type[BaseException]) -> None:
        self._kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, value: object, trace: object) -> bool:
        return kind is not None and issubclass(kind, self._kinds)


class HolderGone(Exception):
    """The holder closed the channel before the session started (a signal)."""


def send_kill(pidfd: int) -> None:
    with Ignoring(ProcessLookupError, PermissionError):
        _signal.pidfd_send_signal(pidfd, _signal.SIGKILL)


def kill_and_reap(pidfd: int) -> None:
    """Kill a child of ours (an orphan we are the subreaper of), reap it, close the pidfd."""
    send_kill(pidfd)
    with Ignoring(ChildProcessError):  # not ours after all: nothing to reap
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
    os.close(pidfd)


def wait_all(pidfds: list[int]) -> None:
    """Wait until every process has exited (bounded), then close the pidfds.

    Waiting makes "no process outlives a launch" true when run() returns,
    not some milliseconds later. A pidfd polls readable once the process
    has exited, even when it is not our child (the inside relays are not).
    poll, not select: a sweep of a namespace that forked fast holds more pidfds
    than select's 1024 descriptor numbers reach.
    """
    poller = select.poll()
    for fd in pidfds:
        poller.register(fd, select.POLLIN)
    pending = len(pidfds)
    deadline = time.monotonic() + KILL_WAIT
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for fd, _ in poller.poll(left * 1000):
            poller.unregister(fd)
            pending -= 1
    for fd in pidfds:
        os.close(fd)


def reap_orphans(groups: set[int]) -> None:
    """Wait (bounded) for the launch's orphans to exit, and reap them; nothing
    else, so no other child's status is taken from whoever waits for it.

    The orphans (become_subreaper): the relays' `groups` (the inside relays'
    leaders, and every relay's connection children, which a killed relay leaves
    behind), and bwrap's init, in this process's group with the session.
    """
    ours = os.getpgrp()
    found: list[int] = []
    pidfds: list[int] = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                children = [int(pid) for pid in f.read().split()]
        except OSError:
            continue
        for pid in children:
            name, state, _, group = _stat(pid)
            if group in groups or (group == ours and name == "bwrap"):
                found.append(pid)
                if state != "Z":
                    with Ignoring(OSError):
                        pidfds.append(os.pidfd_open(pid))
    wait_all(pidfds)
    reap(found)


def _in_namespace(pid: int, userns: os.stat_result) -> bool:
    try:
        st = os.stat(f"/proc/{pid}/ns/user")
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (userns.st_dev, userns.st_ino)


def kill_namespace(userns: os.stat_result, named: str) -> tuple[list[int], list[int]]:
    """SIGKILL every process in the user namespace `userns`, and every child of this
    process called `named`; their pidfds, for wait_all, and the pids of those that are
    this subreaper's children (orphans of the holder), for reap once they have ended.

    Only the teardowns a signal or a refusal interrupted get here: a scan of /proc
    costs a few milliseconds. A pidfd is taken before the second check, so
    the process killed is the one checked, not a later one with its pid.
    The scan is repeated until a pass finds nothing it has not killed: a process the
    scan has not reached yet can fork between the listing and its own kill (the packet
    filter's `sh` starts one tool after another), and its child, in no listing so far,
    would live on. One did, and made its lock file in the private directory as the
    launch removed it (ENOTEMPTY). A killed process forks no more (the kernel fails a
    fork with a fatal signal pending), so the passes end.
    `named`: the egress proxy. It is not dumpable, and its memory map is a fork of this
    process's, so its namespace cannot be read from here unprivileged (EACCES); an
    orphan of the holder, it is this subreaper's child, and every child is this launch's.
    Its parent and name come from /proc/PID/stat, which anyone may read.
    """
    me = os.getpid()
    found: list[int] = []
    children: list[int] = []
    killed: set[int] = set()
    for _ in range(KILL_PASSES):
        before = len(killed)
        try:
            listed = os.listdir("/proc")
        except OSError:  # no descriptor left (EMFILE): the teardown goes on with the rest
            break
        for name in listed:
            if not name.isdigit() or int(name) == me or int(name) in killed:
                continue
            pid = int(name)
            if not (_in_namespace(pid, userns) or _child_named(pid, me, named)):
                continue
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue
            if _in_namespace(pid, userns) or _child_named(pid, me, named):
                send_kill(pidfd)
                found.append(pidfd)
                killed.add(pid)
                if _stat(pid)[2] == me:
                    children.append(pid)
            else:
                os.close(pidfd)
        if len(killed) == before:
            break
    return found, children


def _child_named(pid: int, parent: int, name: str) -> bool:
    found_name, _, found_parent, _ = _stat(pid)
    return (found_parent, found_name) == (parent, name)


def _stat(pid: int) -> tuple[str, str, int, int]:
    """Name, state, parent and process group, from /proc/PID/stat, which anyone may read,
    dumpable or not; ("", "", 0, 0) once gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, tail = f.read().rsplit(")", 1)
        fields = tail.split()
        return head.partition("(")[2], fields[0], int(fields[1]), int(fields[2])
    except (OSError, ValueError, IndexError):
        return "", "", 0, 0


def reap(pids: list[int]) -> None:
    """Reap children that have ended (wait_all waited for them), so that none is left
    a zombie in a caller that lives on."""
    for pid in pids:
        with Ignoring(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
