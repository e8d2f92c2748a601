"""Late masks: what bwrap cannot hide cheaply, hidden by a helper before the agent runs.

Two things need more mounts than bwrap can make in reasonable time (it
re-reads the whole mount table for every bind: hundreds of binds cost
seconds): the outer processes in /proc, and, on a root launch, the files and
directories root keeps from others (rootonly.py). Under `hardening = harsh` the same
helper also makes every writable mount noexec: bwrap has no option for it, and
Landlock's EXECUTE rule covers execve only, not a file mapped executable (check 90).

Container engines mask parts of /proc (Docker's and podman's default), and the
kernel then refuses the sandbox a procfs of its own, so bwrap binds the outer
one read-only. Every process of the container is then listed there, and for
some files nothing but the pid is needed: /proc/PID/cmdline (secrets passed on
a command line) and /proc/PID/net (the container's connections) are not
ptrace-guarded the way environ, fd and maps are (ADR 0006).

So an empty root-owned directory is bound over /proc/PID for every process
outside the sandbox's pid namespace and each of its threads (a thread's
/proc/TID is reachable though never listed), and an empty file or directory
over each root-only path. Nothing inside the sandbox can make these mounts:
it holds no capability, and must not. The launcher can: it owns the user
namespace that owns the sandbox's mount namespace. Two halves talk over a
socketpair:

- the launcher, once the plan is made and before bwrap holds the other end, tells the
  helper what to mask (`instruct`);
- the inner stage, inside, once bwrap has set everything up, sends its pid (as the
  outer procfs numbers it) and waits; nothing of the agent has run yet;
- a helper the launcher forked joins that user and mount namespace (setns),
  makes the mounts, and answers.

On a root launch the helper is forked as soon as the launch knows it runs as root, and
reads the root-only walk's cache and its directories' times while the launcher plans
(rootcache.prefetch): the part of the walk no plan decides, and most of its cost.

A task that ends meanwhile is skipped, never a failed launch. Processes started
outside after this point are listed; where that matters, give the container an
unmasked /proc (docs/explanation/kernel-layers.md).
"""

from __future__ import annotations

import _socket
import errno
import os
import select

from claude_sandbox.core import kernel, paths, wire
from claude_sandbox.core.libc import (
    byref,
    c_char_p,
    c_uint64,
    c_ulong,
    c_void_p,
    get_errno,
    load_libc,
    sizeof,
)
from claude_sandbox.core.process import close_all_but, tie_to_parent
from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from claude_sandbox.launch.facts.rootcache import Prefetched
    from claude_sandbox.launch.facts.rootonly import Walk

_NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1)
TIMEOUT = 10.0
REQUEST_LIMIT = 64  # "mask": the inner stage's one request
PLAN_LIMIT = 1 << 20  # the launcher's instructions: a few hundred paths at most
_WALK_LISTS = ("skip", "roots", "own", "bound", "shown")


def _outer(pid: str) -> bool:
    """Whether `pid` lives outside the sandbox: one NSpid level in the outer procfs."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"NSpid:"):
                    return len(line.split()) == 2
    except OSError:
        return False
    return False


def outer_tasks() -> list[str]:
    """Every outer process and thread id visible in /proc now."""
    found: list[str] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not _outer(name):
            continue
        try:
            found += [tid for tid in os.listdir(f"/proc/{name}/task") if tid not in found]
        except OSError:
            continue
        if name not in found:
            found.append(name)
    return found


def _error(what: str) -> OSError:
    """The last libc call's failure, with its words and what was called."""
    number = get_errno()
    return OSError(number, os.strerror(number), what)


def _join(pid: int) -> None:
    """Enter the user namespace that owns `pid`'s mount namespace, then that namespace."""
    libc = load_libc()
    mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        owner = libc.ioctl(mnt, _NS_GET_USERNS, 0)
        if owner < 0:
            raise _error("NS_GET_USERNS")
        try:
            if libc.setns(owner, kernel.CLONE_NEWUSER) != 0:
                raise _error("setns(user)")
        finally:
            os.close(owner)
        if libc.setns(mnt, kernel.CLONE_NEWNS) != 0:
            raise _error("setns(mnt)")
    finally:
        os.close(mnt)
    os.chdir("/")


def hide(binds: Iterable[tuple[str, str, str]]) -> None:
    """In the sandbox's mount namespace: each (empty source, target, witness), the source
    bound over the target; one whose witness is gone meanwhile (a task that ended, a
    path removed) is skipped, one still there and not hidden fails."""
    libc = load_libc()
    libc.mount.argtypes = (c_char_p, c_char_p, c_char_p, c_ulong,
                           c_void_p)
    for source, target, witness in binds:
        if (libc.mount(source.encode(), target.encode(), None, kernel.MS_BIND, None) != 0
                and os.path.lexists(witness)):
            raise _error(target)


# Kernel file systems whose writable mounts hold no files a program could be mapped from.
_KERNEL_FS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue"})


def writable_mounts(pid: int) -> list[str]:
    """Every writable mount of `pid`'s mount namespace, by class, as that process sees
    them: what bwrap binds read-write, each tmpfs, the views carried in below the
    workspace, the device nodes bound in; and every read-only one that shows files one
    of them shows too. Read before joining: inside, /proc is the sandbox's own, where
    this helper has no /proc/self."""
    from claude_sandbox.core import mountinfo

    table = mountinfo.parse(mountinfo.read(f"/proc/{pid}/mountinfo"))
    writable = [m for m in table if not m.readonly and m.fstype not in _KERNEL_FS]

    def aliases(m: mountinfo.Mount) -> bool:
        # A read-only view of files a writable mount shows too (the same device, at or
        # below its root): a library written through the one maps from the other.
        return any(m.dev == w.dev and (m.root == w.root or m.root.startswith(
            w.root.rstrip("/") + "/")) for w in writable)

    return list(dict.fromkeys(m.mountpoint for m in table
                              if m.fstype not in _KERNEL_FS and (not m.readonly or aliases(m))))


def no_exec(targets: Iterable[str]) -> None:
    """In the sandbox's mount namespace: each target's own mount (not those beneath it)
    noexec, every other flag kept: mount_setattr, not a remount, which a user namespace
    refuses where it would drop a flag the parent's mount has locked.

    A mount whose path this helper may not even walk (EACCES: under a directory of an
    owner the sandbox's user namespace does not map, such as podman's storage below a
    root-only /var/lib/containers on a user's launch) is left as it is: the agent, the
    same user with no capability at all, cannot reach it either, so nothing there can be
    written or run by it. The walk is tried again to tell that from an EACCES of another
    source (a security module refusing the change on a mount the agent can reach): any
    other refusal refuses the launch."""
    libc = load_libc()
    for target in targets:
        attr = (c_uint64 * 4)(kernel.MOUNT_ATTR_NOEXEC, 0, 0, 0)
        if libc.syscall(kernel.SYS_MOUNT_SETATTR, kernel.AT_FDCWD, target.encode(), 0,
                        byref(attr), sizeof(attr)) != 0:
            error = get_errno()
            if error != errno.EACCES or _walkable(target):
                raise OSError(error, os.strerror(error), target)


def _walkable(path: str) -> bool:
    """Whether this process may walk to `path` (a refusal on the way is EACCES)."""
    try:
        os.stat(path, follow_symlinks=False)
    except PermissionError:
        return False
    except OSError:
        return True  # anything else: not a refused walk, so the refusal above stands
    return True


def serve(fd: int, parent: int, early: Prefetched | None = None) -> int:
    """The helper's whole life (a forked child of the launcher): the launcher's
    instructions, then one request, one answer.

    The launcher holds the other end until bwrap takes it (the plan comes from the
    parent only); then only the inner stage, which closes it before the agent runs; the
    pid it names must lead to a mount namespace other than the launcher's.
    """
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, fd)
    step = "reading the launcher's plan"  # said with a failure: which mask was not made
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_PASSCRED, 1)
        # Waited for without a limit: the launcher plans meanwhile, and ends this helper
        # when it stops (tie_to_parent, steps.py).
        try:
            told = wire.receive(sock, PLAN_LIMIT)
        except wire.WireError:
            told = None
        if told is None:
            return 1
        wire.close(told.fds)
        plan = read_plan(told.fields) if told.pid == parent else None
        if plan is None:
            wire.send(sock, ["err", "no plan from the launcher"])
            return 1
        outer_proc, noexec, walk = plan
        # Computed before joining: the walk must see the host's tree, not the sandbox's,
        # and it overlaps bwrap's set-up.
        private = {}
        step = "finding root's own files"
        if walk is not None:
            from claude_sandbox.launch.facts import rootonly

            private = rootonly.covers(walk, early=early)
        step = "waiting for the request from inside"
        ready, _, _ = select.select([fd], [], [], TIMEOUT)
        sock.settimeout(TIMEOUT)  # and a request begun must end within it
        try:
            request = wire.receive(sock, REQUEST_LIMIT) if ready else None
        except wire.WireError:
            request = None
        if request is not None:
            wire.close(request.fds)
        if request is None or request.fields != ("mask",) or request.pid <= 0:
            wire.send(sock, ["err", "no request from inside"])
            return 1
        pid = request.pid
        if os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            wire.send(sock, ["err", "the request came from outside the sandbox"])
            return 1
        step = "reading the sandbox's mounts"
        writable = writable_mounts(pid) if noexec else []
        step = "entering the sandbox's namespaces"
        _join(pid)
        step = "hiding the processes outside in /proc"
        tasks = outer_tasks() if outer_proc else []
        hide((paths.EMPTY_DIR, f"/proc/{tid}", f"/proc/{tid}/status") for tid in tasks)
        step = "covering root's own files"
        hide((paths.EMPTY_DIR if is_dir else paths.EMPTY_FILE, path, path)
             for path, is_dir in private.items())
        step = "making the writable mounts noexec"
        no_exec(writable)
        wire.send(sock, ["ok"])
        return 0
    except OSError as error:
        try:
            where = f"{error.filename}: " if error.filename else ""
            wire.send(sock, ["err", f"{step}: {where}{error.strerror or error}"])
        except OSError:
            pass
        return 1


def plan_fields(outer_proc: bool, noexec: bool, walk: Walk | None) -> list[str]:
    """The launcher's instructions: "plan", the two flags, then the walk or nothing:
    its cache, then each of its lists as a count and the paths."""
    fields = ["plan", "1" if outer_proc else "0", "1" if noexec else "0"]
    if walk is not None:
        fields.append(walk.cache)
        for name in _WALK_LISTS:
            values = getattr(walk, name)
            fields += [str(len(values)), *values]
    return fields


def read_plan(fields: tuple[str, ...]) -> tuple[bool, bool, Walk | None] | None:
    """Inverse of plan_fields; None for anything it would not have written."""
    if len(fields) < 3 or fields[0] != "plan" or not {fields[1], fields[2]} <= {"0", "1"}:
        return None
    flags = fields[1] == "1", fields[2] == "1"
    if len(fields) == 3:
        return (*flags, None)
    lists: list[tuple[str, ...]] = []
    at = 4
    for _ in _WALK_LISTS:
        if at >= len(fields) or not fields[at].isascii() or not fields[at].isdigit():
            return None
        count = int(fields[at])
        if at + 1 + count > len(fields):
            return None
        lists.append(tuple(fields[at + 1:at + 1 + count]))
        at += 1 + count
    if at != len(fields):
        return None
    from claude_sandbox.launch.facts.rootonly import Walk

    return (*flags, Walk(fields[3], *lists))


@record
class Helper:
    """The helper forked: its pid, and the end the inner stage gets (close-on-exec, as
    every descriptor of the launch's, until the child meant to inherit it is started)."""

    pid: int
    fd: int
    cache: str | None = None  # the walk cache it read from its start (start_helper)


def start_helper(cache: str | None = None) -> Helper:
    """Fork the helper, to hide the outer processes and the root-only entries and to make
    writable mounts noexec, as `instruct` later tells it. `cache`: a root launch's walk
    cache, which the helper reads at once, with its directories' times
    (rootcache.prefetch), while the launcher plans."""
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    ours.setsockopt(_socket.SOL_SOCKET, _socket.SO_PASSCRED, 1)  # before anything is sent
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            theirs.close()
            keep = ours.fileno()
            # The jail's channel and the rest are not its business, nor what the launcher
            # inherited, at any number (check 102).
            close_all_but({0, 1, 2, keep})
            # Ends with the launcher, even SIGKILLed: nothing else would end it.
            if tie_to_parent(parent):
                early = None
                if cache is not None:
                    from claude_sandbox.launch.facts import rootcache

                    early = rootcache.prefetch(cache)
                status = serve(ours.detach(), parent, early)
        finally:
            os._exit(status)
    ours.close()
    return Helper(pid, theirs.detach(), cache)


def instruct(helper: Helper, outer_proc: bool, noexec: bool, walk: Walk | None) -> None:
    """Tell the helper what to mask, before bwrap holds the other end: the outer
    processes, every writable mount's exec, and `walk`'s root-only entries."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, helper.fd)
    try:
        wire.send(sock, plan_fields(outer_proc, noexec, walk), credentials=True)
    finally:
        sock.detach()


def stop(helper: Helper, *, close: bool) -> None:
    """End the helper and reap it (after the session, or a launch that stopped); with
    `close`, close the launcher's end of its socket too (where nothing else owns it)."""
    try:
        os.kill(helper.pid, 9)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(helper.pid, 0)
    except ChildProcessError:
        pass
    if close:
        os.close(helper.fd)
