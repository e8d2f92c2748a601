"""`hardening = brokered`: the agent's own view and the limits of its process.

`_enter`'s agent child calls these before it execs the agent (broker.run): a user
and mount namespace of its own, in which the workspace, every allow-write path and
every other place the agent writes are noexec and the command client stands in for
every shell; and a seccomp filter
of its own against memory-only programs and connections its port rules cannot see.
Its Landlock domain (landlock.enter_brokered) comes between the two and forbids every
mount change after it, so nothing the agent runs can undo the view. The command
server's side is broker.py.
"""

from __future__ import annotations

import os

from claude_sandbox.core import bpf, kernel, paths
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.libc import byref, c_uint64, get_errno, load_libc, sizeof
from claude_sandbox.inside.spec import Inner


def check(result: int, what: str) -> None:
    """A libc call's result: an OSError naming `what` unless it is 0."""
    if result != 0:
        err = get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def own_namespaces(flags: int) -> None:
    """unshare(flags) with a new user namespace that maps this uid and gid to themselves."""
    uid, gid = os.getuid(), os.getgid()
    check(load_libc().unshare(flags | kernel.CLONE_NEWUSER), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)


def mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    check(load_libc().mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {target}")


def agent_view(settings: Inner) -> None:
    """In the agent's own namespaces: the workspace noexec, the client in place of each
    shell. Made before its Landlock domain, which then forbids every mount change, so
    nothing the agent runs can undo them."""
    own_namespaces(kernel.CLONE_NEWNS)
    mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
    for path in settings.commands_only:
        # The agent's own file tools write here (its Write and Edit; docs/adr/0009), but
        # nothing written here runs or is mapped executable by its process: a command run
        # through the server may build and run it anyway. Each is a mount of its own
        # (launch/planner/mounts.py binds it); recursive: the views and pins inside it too. The
        # control paths stay read-only, as bwrap bound them.
        _set_attr(path, kernel.MOUNT_ATTR_NOEXEC, recursive=True, what="noexec")
    for shell in settings.shells:
        mount(paths.COMMAND_CLIENT, shell, None, kernel.MS_BIND)
        read_only(shell)
    for path in settings.agent_writable:
        # What the agent writes it cannot map executable either (LD_PRELOAD, `ld.so
        # ./prog`): Landlock's EXECUTE covers execve only (check 90). Each is a mount of
        # its own; the programs bound read-only beneath keep theirs.
        _set_attr(path, kernel.MOUNT_ATTR_NOEXEC, recursive=False, what="noexec")


def read_only(path: str) -> None:
    """Read-only, recursively, every other flag kept."""
    _set_attr(path, kernel.MOUNT_ATTR_RDONLY, recursive=True, what="read-only")


def _set_attr(path: str, flag: int, *, recursive: bool, what: str) -> None:
    """mount_setattr(MOUNT_ATTR_*): one flag set, every other kept. Not a remount: in a
    user namespace of our own, a remount that leaves out a flag the parent's mount has
    locked (nosuid, nodev) is refused."""
    attr = (c_uint64 * 4)(flag, 0, 0, 0)
    result = load_libc().syscall(kernel.SYS_MOUNT_SETATTR, kernel.AT_FDCWD, path.encode(),
                                 kernel.AT_RECURSIVE if recursive else 0, byref(attr),
                                 sizeof(attr))
    check(result, f"{what} {path}")


# Filters of the agent's own and of offline commands, stacked on the sandbox's: rows of
# (name, x86_64, aarch64, errno, tests that must all match). Each refusal answers as a
# kernel without the feature would, so programs fall back.
_ENOSYS, _EPROTONOSUPPORT, _EOPNOTSUPP = 38, 93, 95
_MSG_FASTOPEN = 0x20000000
_INET, _INET6 = bpf.ArgTest(0, 0xFFFFFFFF, 2), bpf.ArgTest(0, 0xFFFFFFFF, 10)
_SOCK_TYPE = 0xF  # the type without SOCK_NONBLOCK and SOCK_CLOEXEC
Row = tuple[str, int, int, int, tuple[bpf.ArgTest, ...]]
# fmt: off
# Landlock does not govern memfds (they live on an internal mount), so a binary the
# agent holds only in memory would run whatever its EXECUTE rules say (measured: the
# loader the agent needs runs it). A file anywhere the agent can write is governed.
MEMORY_RULES: tuple[Row, ...] = (("memfd_create", 319, 279, _ENOSYS, ()),)
# Landlock's TCP port rules see IPPROTO_TCP sockets only: MPTCP, SCTP and DCCP connect
# past them (measured for MPTCP), whether asked for by protocol or by an IP socket's type
# (SOCK_SEQPACKET is SCTP's, SOCK_DCCP DCCP's); and TCP Fast Open connects inside send*(),
# where Landlock's connect hook never runs.
TRANSPORT_RULES: tuple[Row, ...] = (
    ("socket", 41, 198, _EPROTONOSUPPORT, (bpf.ArgTest(2, 0xFFFFFFFF, 262),)),  # MPTCP
    ("socket", 41, 198, _EPROTONOSUPPORT, (bpf.ArgTest(2, 0xFFFFFFFF, 132),)),  # SCTP
    ("socket", 41, 198, _EPROTONOSUPPORT, (bpf.ArgTest(2, 0xFFFFFFFF, 33),)),  # DCCP
    *(("socket", 41, 198, _EPROTONOSUPPORT, (family, bpf.ArgTest(1, _SOCK_TYPE, kind)))
      for family in (_INET, _INET6) for kind in (5, 6)),  # SOCK_SEQPACKET, SOCK_DCCP
    ("sendto", 44, 206, _EOPNOTSUPP, (bpf.ArgTest(3, _MSG_FASTOPEN, _MSG_FASTOPEN),)),
    ("sendmsg", 46, 211, _EOPNOTSUPP, (bpf.ArgTest(2, _MSG_FASTOPEN, _MSG_FASTOPEN),)),
    ("sendmmsg", 307, 269, _EOPNOTSUPP, (bpf.ArgTest(3, _MSG_FASTOPEN, _MSG_FASTOPEN),)),
)
AGENT_RULES = (*MEMORY_RULES, *TRANSPORT_RULES)
# fmt: on


def _assembled(rows: tuple[Row, ...], machine: str) -> bytes:
    return bpf.assemble(tuple(bpf.Refusal(x86 if machine == "x86_64" else arm, errno, tests)
                              for _, x86, arm, errno, tests in rows), machine)


def agent_filter(machine: str) -> bytes:
    """The agent's own filter on `machine`."""
    return _assembled(AGENT_RULES, machine)


def limit_agent() -> None:
    """Load the agent's own filter: no memory-only programs, and no connection its
    Landlock port rules cannot see (docs/adr/0009-the-enforced-process-tree.md)."""
    _load(AGENT_RULES, "the agent's own seccomp filter")


def limit_transports() -> None:
    """An offline command's filter: no connection Landlock's TCP rules cannot see, on a
    socket the agent may hand it."""
    _load(TRANSPORT_RULES, "an offline command's seccomp filter")


def _load(rows: tuple[Row, ...], what: str) -> None:
    machine = os.uname().machine
    if machine not in bpf.ARCHES:
        raise SandboxError(f"hardening = brokered: {what} has no system-call table for "
                           f"{machine}", EXIT_UNAVAILABLE)
    if not bpf.load(_assembled(rows, machine)):
        raise SandboxError(f"hardening = brokered: cannot load {what}", EXIT_UNAVAILABLE)
