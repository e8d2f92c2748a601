"""The Landlock layer, entered inside bwrap just before the agent runs.

Why inside: a process already in a Landlock domain cannot run bwrap ("Failed
to make / slave", measured), and the domain is inherited by every descendant and
can never be left, so the last step before exec is the right place.

What it does, best-effort by the kernel's ABI (docs/explanation/kernel-layers.md):
- standard: scope signals and abstract unix sockets (ABI >= 6), so the agent
  cannot signal, or connect to an abstract socket of, anything outside the
  sandbox even where it can see the PID or share the network namespace;
- harsh: also handle EXECUTE and grant it only on read-only subtrees, so a
  binary the agent writes anywhere it can write does not run (check 50).
A right the kernel lacks is reported once on stderr, never dropped quietly;
harsh without Landlock at all refuses the launch.

Known limits (docs/explanation/kernel-layers.md): EXECUTE does not stop
`ld.so ./prog`, `sh script` or `python script` (the file is read, not
executed), nor memfd execution (memfds live on an internal mount that
Landlock does not govern).
"""

from __future__ import annotations

import ctypes
import os
import posixpath
import sys

from claude_sandbox.core import kernel, mountinfo, paths
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.libc import load_libc
from claude_sandbox.core.mountinfo import Mount
from claude_sandbox.core.record import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs ~10 ms per launch
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

ACCESS_FS_EXECUTE = 1 << 0
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1
SCOPE_ABI = 6  # the first ABI with `scoped`

_ST_RDONLY = 1  # os.ST_RDONLY


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in linux/landlock.h
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_lib = load_libc


def _syscall(*args: int | None) -> int:
    return int(_lib().syscall(*[None if a is None else ctypes.c_long(a) for a in args]))


def abi_version() -> int:
    """The Landlock ABI of the running kernel; 0 when Landlock is absent or disabled."""
    ret = _syscall(kernel.SYS_LANDLOCK_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(ret, 0)


# ------------------------------------------------------------ pure planning
# Records are core/record.py's, not dataclasses, on purpose: this module runs in
# `_enter` at every launch of harsh and brokered, and importing dataclasses (inspect, ast, re...)
# costs more than all of Landlock (bench/bench_layers.py). Mount records and
# their parser are in mountinfo.py, shared with the shim's guard.


_within = paths.under


def exec_allowed_roots(
    writable: Sequence[str], listdir: Callable[[str], Iterable[str]], top: str = "/"
) -> tuple[str, ...]:
    """The fewest paths that together cover `top` minus every writable path.

    Landlock is an allow-list and its path-beneath rules are hierarchical, so
    "no EXECUTE where the sandbox can write" becomes "EXECUTE on each subtree
    that holds no writable path": walk down only through ancestors of a
    writable path (those are read-only, so their listing cannot change after
    we look) and grant every sibling that is not writable. An entry that
    cannot be listed gets no grant: a missing right fails closed.
    """
    dirty = [posixpath.normpath(p) for p in writable]
    roots: list[str] = []

    def cover(path: str) -> None:
        if any(_within(path, w) for w in dirty):
            return
        if not any(_within(w, path) for w in dirty):
            roots.append(path)
            return
        try:
            names = sorted(listdir(path))
        except OSError:
            return
        for name in names:
            cover(posixpath.join(path, name))

    cover(posixpath.normpath(top))
    return tuple(roots)


def visible_mounts(mounts: Sequence[Mount]) -> tuple[Mount, ...]:
    """Drop mounts covered by a later mount at the same point or above it.

    bwrap stacks mounts (its own /dev tmpfs over the host's /dev and the
    host's /dev/shm below it); only the top of each stack is reachable.
    """
    return tuple(
        m
        for i, m in enumerate(mounts)
        if not any(_within(m.mountpoint, later.mountpoint) for later in mounts[i + 1 :])
    )


def _mount_of(path: str, visible: Sequence[Mount]) -> Mount | None:
    best: Mount | None = None
    for m in visible:
        if _within(path, m.mountpoint) and (
            best is None or len(m.mountpoint) >= len(best.mountpoint)
        ):
            best = m
    return best


def writable_elsewhere(path: str, mounts: Sequence[Mount], visible: Sequence[Mount]) -> bool:
    """Whether the inode at `path` is reachable below a read-write mount's root.

    Landlock rules live on inodes and the kernel's path walk stops climbing at
    a mount's root, so a grant on a directory is also a grant through any
    read-write bind whose root contains it (the same directory bound twice).
    """
    here = _mount_of(path, visible)
    if here is None:
        return True
    rel = path[len(here.mountpoint) :] if here.mountpoint != "/" else path
    fs_path = posixpath.normpath(here.root + "/" + rel)
    return any(not m.readonly and m.dev == here.dev and _within(fs_path, m.root) for m in mounts)


# roots: EXECUTE grants; refused: would-be grants writable through another mount.
@record
class ExecPlan:
    roots: tuple[str, ...]
    refused: tuple[str, ...]


def plan_exec(
    mounts: Sequence[Mount],
    writable: Sequence[str],
    exec_files: Sequence[str],
    listdir: Callable[[str], Iterable[str]],
) -> ExecPlan:
    """EXECUTE grants for harsh: the read-only cover of /, plus read-only binds
    that sit inside writable trees (the agent binary in a tmpfs $HOME)."""
    # Every read-write mount point, hidden ones included (over-counting only denies more).
    dirty = (*writable, *(m.mountpoint for m in mounts if not m.readonly))
    visible = visible_mounts(mounts)
    roots = list(exec_allowed_roots(dirty, listdir))
    ro_inside = [
        m.mountpoint
        for m in visible
        if m.readonly and any(_within(m.mountpoint, w) and m.mountpoint != w for w in dirty)
    ]
    for top in (*exec_files, *ro_inside):
        inner = [w for w in dirty if _within(w, top) and w != top]
        roots.extend(exec_allowed_roots(inner, listdir, top) if inner else (top,))
    unique = tuple(dict.fromkeys(roots))
    refused = tuple(r for r in unique if writable_elsewhere(r, mounts, visible))
    return ExecPlan(tuple(r for r in unique if r not in refused), refused)


# ------------------------------------------------------------- enforcement
def _warn(message: str) -> None:
    sys.stderr.write(f"claude-sandbox: warning: {message}\n")


def _fail(what: str) -> SandboxError:
    err = ctypes.get_errno()
    return SandboxError(f"Landlock: {what} failed: {os.strerror(err)}", EXIT_UNAVAILABLE)


def _add_exec_rule(ruleset: int, path: str) -> bool:
    """Grant EXECUTE beneath `path`; False when it is not safe to (see below)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        # A symlink root would grant its target, which may be writable; a root
        # on a read-write mount must never be granted, whatever the plan said.
        if os.path.islink(path) or not os.fstatvfs(fd).f_flag & _ST_RDONLY:
            return False
        attr = _PathBeneathAttr(ACCESS_FS_EXECUTE, fd)
        if _syscall(kernel.SYS_LANDLOCK_ADD_RULE, ruleset, _RULE_PATH_BENEATH,
                    ctypes.addressof(attr), 0) < 0:
            raise _fail(f"add_rule({path})")
        return True
    finally:
        os.close(fd)


def _restrict_self(ruleset: int) -> None:
    """Enter the ruleset's domain. restrict_self needs no_new_privs (bwrap sets it;
    asking again is free)."""
    if _lib().prctl(kernel.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
    if _syscall(kernel.SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) < 0:
        raise _fail("restrict_self")


def enter(level: str, writable: Sequence[str] = (), exec_files: Sequence[str] = (),
          *, no_rendezvous: bool = False) -> None:
    """Put this process (and so the agent) into its Landlock domain. Irreversible.

    `no_rendezvous`: no socket file and no FIFO may be made anywhere, and no TCP socket
    connected or bound (an offline command of brokered's: a meeting place, or a socket
    the agent hands it over a stream, is a way round its missing network)."""
    abi = abi_version()
    scoped = SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET if abi >= SCOPE_ABI else 0
    handled_fs = (ACCESS_FS_EXECUTE if level == "harsh" else 0) | (
        RENDEZVOUS if no_rendezvous else 0)
    if abi == 0:
        if level == "harsh":
            raise SandboxError(
                "hardening = harsh needs Landlock (no EXECUTE where the sandbox can write), "
                "and this kernel has none; use hardening = standard or enable Landlock",
                EXIT_UNAVAILABLE,
            )
        _warn("Landlock is unavailable: signals and abstract sockets are not scoped")
        return
    if not scoped:
        _warn(f"Landlock ABI {abi} < 6: signals and abstract sockets are not scoped")
    if not scoped and not handled_fs:
        return
    if no_rendezvous and not scoped:
        raise SandboxError("an offline command needs Landlock ABI 6", EXIT_UNAVAILABLE)
    handled_net = _NET_BIND | _NET_CONNECT if no_rendezvous else 0  # no port granted
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = 24 if abi >= SCOPE_ABI else 16 if abi >= 4 else 8
    ruleset = _syscall(kernel.SYS_LANDLOCK_CREATE_RULESET, ctypes.addressof(attr), size, 0)
    if ruleset < 0:
        raise _fail("create_ruleset")
    try:
        if handled_fs & ACCESS_FS_EXECUTE:
            mounts = mountinfo.parse(mountinfo.read())
            plan = plan_exec(mounts, writable, exec_files, os.listdir)
            if plan.refused:  # one line, whatever their number: the details are explain's
                shown = ", ".join(plan.refused[:3])
                more = f" and {len(plan.refused) - 3} more" if len(plan.refused) > 3 else ""
                _warn(f"harsh: {len(plan.refused)} read-only place(s) are also writable "
                      f"through another mount, so nothing there may run ({shown}{more}); "
                      "`claude-sandbox explain` lists harsh's rules")
            for path in plan.roots:
                _add_exec_rule(ruleset, path)
        _restrict_self(ruleset)
    finally:
        os.close(ruleset)


# What brokered handles besides EXECUTE: writing, and every change to the file
# system (make, remove, rename across directories, truncate), by the ABI that has it.
_WRITE_FILE = 1 << 1
_CHANGES = sum(1 << bit for bit in range(4, 13))  # remove dir/file, make char..sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
# MAKE_SOCK and MAKE_FIFO: a file two processes can meet at.
RENDEZVOUS = (1 << 9) | (1 << 10)
_NET_BIND, _NET_CONNECT, _RULE_NET_PORT = 1 << 0, 1 << 1, 2  # TCP, ABI 4


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in linux/landlock.h
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


def enter_brokered(writable: Sequence[str], execute: Sequence[str],
                   connect: Sequence[int] = (), bind: Sequence[int] = (),
                   *, no_rendezvous: bool = False) -> None:
    """The agent's domain under brokered (broker.py): EXECUTE only `execute`, write and
    change only beneath `writable`, TCP connect only to `connect` and listen only on
    `bind`, signals and abstract sockets scoped; with `no_rendezvous` (offline
    commands), no socket file or FIFO anywhere. Irreversible.

    Fails closed: without ABI 6 the agent could signal or reach what is outside it."""
    abi = abi_version()
    if abi < SCOPE_ABI:
        raise SandboxError(
            f"hardening = brokered needs Landlock ABI {SCOPE_ABI} (signal and socket "
            f"scoping); this kernel has {abi or 'none'}: use hardening = harsh",
            EXIT_UNAVAILABLE)
    write = _WRITE_FILE | _CHANGES | _REFER | _TRUNCATE
    attr = _RulesetAttr(ACCESS_FS_EXECUTE | write, _NET_BIND | _NET_CONNECT,
                        SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET)
    ruleset = _syscall(kernel.SYS_LANDLOCK_CREATE_RULESET, ctypes.addressof(attr),
                       ctypes.sizeof(attr), 0)
    if ruleset < 0:
        raise _fail("create_ruleset")
    granted = write & ~RENDEZVOUS if no_rendezvous else write
    try:
        for path in writable:
            _add_rule(ruleset, path, granted)
        for path in execute:
            # As harsh's grants: never a symlink, never on a read-write mount.
            if not _add_exec_rule(ruleset, path):
                _warn(f"brokered: {path} is not on a read-only mount; no EXECUTE there")
        for ports, access in ((connect, _NET_CONNECT), (bind, _NET_BIND)):
            for port in ports:
                rule = _NetPortAttr(access, port)
                if _syscall(kernel.SYS_LANDLOCK_ADD_RULE, ruleset, _RULE_NET_PORT,
                            ctypes.addressof(rule), 0) < 0:
                    raise _fail(f"add_rule(port {port})")
        _restrict_self(ruleset)
    finally:
        os.close(ruleset)


_FILE_RIGHTS = ACCESS_FS_EXECUTE | _WRITE_FILE | _TRUNCATE  # what a rule on a file may hold


def _add_rule(ruleset: int, path: str, access: int) -> None:
    """A rule beneath `path`; a path that does not exist gets none (nothing to grant)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            access &= _FILE_RIGHTS
        attr = _PathBeneathAttr(access, fd)
        if _syscall(kernel.SYS_LANDLOCK_ADD_RULE, ruleset, _RULE_PATH_BENEATH,
                    ctypes.addressof(attr), 0) < 0:
            raise _fail(f"add_rule({path})")
    finally:
        os.close(fd)


def describe(level: str, abi: int | None = None) -> list[str]:
    """Lines for `claude-sandbox explain` and `doctor`."""
    abi = abi_version() if abi is None else abi
    lines = [f"Landlock ({level}): kernel ABI {abi}" if abi else "Landlock: not available"]
    if abi >= SCOPE_ABI:
        lines.append("  signals and abstract unix sockets scoped to the sandbox")
    else:
        lines.append("  NOT ENFORCED: signal and abstract-socket scoping (needs ABI 6)")
    if level == "brokered":
        lines.append("  the agent executes only its own program, its loader and the command "
                     "client (every shell);")
        lines.append("  it writes the workspace but runs nothing written there (noexec), "
                     "connects over TCP only to its ports; each shell runs through")
        lines.append("  the command server in a sandbox of its own "
                     "(docs/explanation/process-tree.md)")
    if level == "harsh":
        if abi:
            lines.append("  EXECUTE only on read-only subtrees: nothing written inside runs")
            lines.append("  (does not stop `ld.so ./prog`, `sh script` or memfd execution)")
        else:
            lines.append("  REFUSED: harsh needs Landlock for its no-EXECUTE rule")
    return lines
