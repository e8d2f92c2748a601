"""`hardening = brokered`: the agent's own view and the limits of its process.

`_enter`'s agent child calls these before it execs the agent (broker.run): a user
and mount namespace of its own, in which the workspace and every allow-write path
are read-only and the command client stands in for every shell; and a seccomp filter
of its own against memory-only programs. Its Landlock domain (landlock.enter_brokered)
comes between the two and forbids every mount change after it, so nothing the agent
runs can undo the view. The command server's side is broker.py.
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.process import load_libc
from claude_sandbox.inside.spec import Inner

CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x20000
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
# mount_setattr(2): the same number on x86_64 and aarch64 (the unified table).
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1


def check(result: int, what: str) -> None:
    """A libc call's result: an OSError naming `what` unless it is 0."""
    if result != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def own_namespaces(flags: int) -> None:
    """unshare(flags) with a new user namespace that maps this uid and gid to themselves."""
    uid, gid = os.getuid(), os.getgid()
    check(load_libc().unshare(flags | CLONE_NEWUSER), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)


def mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    check(load_libc().mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {target}")


def agent_view(settings: Inner) -> None:
    """In the agent's own namespaces: the writable workspace read-only, the client in
    place of each shell. Made before its Landlock domain, which then forbids every
    mount change, so nothing the agent runs can undo them."""
    own_namespaces(CLONE_NEWNS)
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    for path in settings.commands_only:
        # Each is a mount of its own (launch/mounts.py binds it); recursive: the pins
        # and control paths mounted inside it too.
        read_only(path)
    for shell in settings.shells:
        mount(paths.COMMAND_CLIENT, shell, None, _MS_BIND)
        read_only(shell)


def read_only(path: str) -> None:
    """mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY): read-only, every other flag kept.
    Not a remount: in a user namespace of our own, a remount that leaves out a flag the
    parent's mount has locked (nosuid, nodev) is refused."""
    import ctypes

    attr = (ctypes.c_uint64 * 4)(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    result = load_libc().syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), _AT_RECURSIVE,
                             ctypes.byref(attr), ctypes.sizeof(attr))
    check(result, f"read-only {path}")


# memfd_create's number, and the audit arch the filter below checks, by machine.
_MEMFD = {"x86_64": (319, 0xC000003E), "aarch64": (279, 0xC00000B7)}
_ENOSYS = 38
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def refuse_memfd() -> None:
    """A filter of the agent's own, stacked on the sandbox's: memfd_create fails (ENOSYS,
    as on a kernel without it; programs fall back to files).

    Landlock does not govern memfds (they live on an internal mount), so a binary the
    agent holds only in memory would run whatever its EXECUTE rules say (measured: the
    loader the agent needs runs it). A file anywhere the agent can write is governed."""
    import ctypes
    import struct

    found = _MEMFD.get(os.uname().machine)
    if found is None:
        raise SandboxError("hardening = brokered: memfd_create's number on "
                           f"{os.uname().machine} is not known", EXIT_UNAVAILABLE)
    number, arch = found
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET
    code = [(ld, 0, 0, 4), (jeq, 0, 3, arch), (ld, 0, 0, 0), (jeq, 0, 1, number),
            (ret, 0, 0, 0x00050000 | _ENOSYS), (ret, 0, 0, 0x7FFF0000)]
    raw = b"".join(struct.pack("<HBBI", *insn) for insn in code)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class _Prog(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    prog = _Prog(len(code), ctypes.addressof(buffer))
    if load_libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0):
        raise SandboxError("hardening = brokered: cannot load the agent's memfd filter",
                           EXIT_UNAVAILABLE)
