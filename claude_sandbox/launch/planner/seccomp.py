"""The seccomp layer: a classic-BPF filter built from a table, no libseccomp at run time.

bwrap loads the program with `--seccomp FD` after it has set up the sandbox
and before it execs the entry (docs/explanation/kernel-layers.md). The policy
is the `RULES` table below; core/bpf.py assembles the rows into BPF, and kills
foreign system-call ABIs. Everything not named is allowed: this is a deny-list of
the calls an agent never needs and an attacker wants (reading another process's
memory or descriptors, kernel attack surface with a history of bugs, typing
into the terminal's input queue).
"""

from __future__ import annotations

import os
from errno import EAFNOSUPPORT, ENOSYS, EPERM, EPROTONOSUPPORT, ESOCKTNOSUPPORT, errorcode

from claude_sandbox.core import kernel
from claude_sandbox.core.bpf import ARCHES, ArgNotIn, ArgTest, Refusal, assemble
from claude_sandbox.core.errors import EXIT_CONFIG, EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.process import data_descriptor
from claude_sandbox.core.record import record
from claude_sandbox.inside.spec import LEVELS

# linux/socket.h, in.h, netlink.h. What a sandbox's sockets may be: local ones; IP by
# stream, datagram or raw socket, for TCP, UDP and ICMP (a ping socket); netlink for
# routes, socket diagnostics and uevents (getifaddrs, `ip`, `ss`). vsock is its own row
# below (allow-vsock).
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_VSOCK = 1, 2, 10, 16, 40
FAMILIES = (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_VSOCK)
IP_TYPES = (1, 2, 3)  # SOCK_STREAM, SOCK_DGRAM, SOCK_RAW (not SEQPACKET: SCTP; nor PACKET)
IP_PROTOCOLS = (0, 1, 6, 17, 58)  # the type's default, ICMP, TCP, UDP, ICMPv6
NETLINK_PROTOCOLS = (0, 4, 15)  # NETLINK_ROUTE, NETLINK_SOCK_DIAG, NETLINK_KOBJECT_UEVENT
_FAMILY = 0xFFFFFFFF
_TYPE = 0xF  # the type without SOCK_NONBLOCK and SOCK_CLOEXEC
# ioctl requests (asm-generic/ioctls.h, the same on both architectures).
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
# The launch flag under which max-memory holds per process only (limits.py).
MEMORY_PER_PROCESS = "max-memory-per-process"


@record
class Rule:
    name: str
    x86_64: int
    aarch64: int
    why: str
    args: tuple[ArgTest | ArgNotIn, ...] = ()  # all must match
    errno: int = EPERM
    level: str = "standard"  # "standard": every level; "harsh": harsh only
    unless: str = ""  # a launch flag that drops the row (allow-vsock)
    when: str = ""  # a launch flag without which the row is dropped


_NEWUSER = ArgTest(0, kernel.CLONE_NEWUSER, kernel.CLONE_NEWUSER)

# The policy. One row per denial, EPERM at both levels unless it says otherwise; a
# reviewer reads this and nothing else.
# fmt: off
RULES: tuple[Rule, ...] = (
    Rule("ioctl", 16, 29,
         "TIOCSTI pushes bytes into the terminal's input: commands typed for the user's shell",
         (ArgTest(1, 0xFFFFFFFF, TIOCSTI),)),
    Rule("ioctl", 16, 29, "TIOCLINUX can also inject console input (paste selection)",
         (ArgTest(1, 0xFFFFFFFF, TIOCLINUX),)),
    Rule("ptrace", 101, 117,
         "no Yama here: nothing else stops tracing a same-uid process (measured)"),
    Rule("process_vm_readv", 310, 270, "reads another process's memory"),
    Rule("process_vm_writev", 311, 271, "writes another process's memory"),
    Rule("pidfd_getfd", 438, 438,
         "steals a descriptor (a socket, a credential file) from another process"),
    Rule("bpf", 321, 280, "kernel attack surface; not needed by agents"),
    Rule("perf_event_open", 298, 241, "kernel attack surface and a side channel"),
    Rule("keyctl", 250, 219, "the kernel keyring may hold host secrets"),
    Rule("add_key", 248, 217, "the kernel keyring"),
    Rule("request_key", 249, 218, "the kernel keyring"),
    Rule("userfaultfd", 323, 282, "widens kernel race windows; a favourite exploit primitive"),
    Rule("io_uring_setup", 425, 425,
         "io_uring bypasses per-call filtering and has a long CVE history"),
    Rule("io_uring_enter", 426, 426, "io_uring"),
    Rule("io_uring_register", 427, 427, "io_uring"),
    Rule("kexec_load", 246, 104, "replaces the running kernel"),
    Rule("kexec_file_load", 320, 294, "replaces the running kernel"),
    Rule("init_module", 175, 105, "loads kernel code"),
    Rule("finit_module", 313, 273, "loads kernel code"),
    Rule("delete_module", 176, 106, "unloads kernel code"),
    Rule("open_by_handle_at", 304, 265,
         "opens files by handle, around the mount namespace (the 'shocker' escape)"),
    # Sockets by class, each refusal as a kernel without the feature would answer. Every
    # address family but these: some no network namespace contains (Bluetooth, Qualcomm's
    # IPC router), the rest are kernel attack surface an agent never needs (AF_PACKET
    # once a nested user namespace gives CAP_NET_RAW, AF_ALG, TIPC, RDS, KCM). Within IP
    # and netlink, the same by type and protocol: SOCK_PACKET is AF_PACKET by another
    # name (the kernel swaps the family after this filter has run), SEQPACKET is SCTP,
    # and a protocol such as SMC, SCTP or L2TP, or generic netlink (TIPC's way in), or
    # nf_tables and xfrm reach what the family rows keep out (check 97, probe A69).
    Rule("socket", 41, 198, "an address family other than unix, IP and netlink",
         (ArgNotIn(0, FAMILIES),), errno=EAFNOSUPPORT),
    Rule("socketpair", 53, 199, "a pair of any family but unix",
         (ArgNotIn(0, (AF_UNIX,)),), errno=EAFNOSUPPORT),
    *(Rule("socket", 41, 198, "an IP socket type other than stream, datagram and raw",
           (ArgTest(0, _FAMILY, family), ArgNotIn(1, IP_TYPES, _TYPE)),
           errno=ESOCKTNOSUPPORT) for family in (AF_INET, AF_INET6)),
    *(Rule("socket", 41, 198, "an IP protocol other than TCP, UDP and ICMP",
           (ArgTest(0, _FAMILY, family), ArgNotIn(2, IP_PROTOCOLS)),
           errno=EPROTONOSUPPORT) for family in (AF_INET, AF_INET6)),
    Rule("socket", 41, 198, "a netlink protocol other than routes, diagnostics, uevents",
         (ArgTest(0, _FAMILY, AF_NETLINK), ArgNotIn(2, NETLINK_PROTOCOLS)),
         errno=EPROTONOSUPPORT),
    # A network namespace does not contain AF_VSOCK: a bind takes a port of the whole
    # VM's vsock space, and a connect reaches the hypervisor's services (check 88).
    Rule("socket", 41, 198, "AF_VSOCK reaches the VM's host, past every network namespace",
         (ArgTest(0, _FAMILY, AF_VSOCK),), unless="allow-vsock"),
    # max-memory with no memory cgroup is RLIMIT_DATA per process, which a memfd's
    # pages escape: refused as a kernel without it would (programs fall back to a file
    # on a tmpfs, which the plan then caps; check 91).
    Rule("memfd_create", 319, 279, "its pages escape a per-process memory cap",
         errno=ENOSYS, when=MEMORY_PER_PROCESS),
    Rule("shmget", 29, 194, "System V shared memory escapes a per-process memory cap (the "
         "sandbox's IPC namespace sets no size)", errno=ENOSYS, when=MEMORY_PER_PROCESS),
    # Harsh: nothing the sandbox wrote runs, and a memfd is a place it writes that no
    # mount option reaches (an internal mount; Landlock lets it pass too): a program
    # written there runs by execveat or through ld.so /proc/self/fd/N (probe A68).
    Rule("memfd_create", 319, 279, "a program written to memory runs past noexec",
         errno=ENOSYS, level="harsh"),
    # Harsh: no nested user namespaces. Standard keeps them because codex and
    # Anthropic's sandbox runtime build their own sandbox inside (measured).
    Rule("unshare", 272, 97, "a new user namespace regains capabilities", (_NEWUSER,),
         level="harsh"),
    Rule("clone", 56, 220, "a new user namespace regains capabilities", (_NEWUSER,),
         level="harsh"),
    # clone3 passes its flags in a struct that BPF cannot read; ENOSYS makes
    # glibc fall back to clone(2), whose flags the row above does inspect.
    Rule("clone3", 435, 435, "flags hidden from BPF; fall back to clone", errno=ENOSYS,
         level="harsh"),
)
# fmt: on


def rules_for(level: str, flags: tuple[str, ...] = ()) -> tuple[Rule, ...]:
    """The rows for `level` under this launch's `flags`: a row's `unless` flag drops it,
    its `when` flag, if it has one, must be there."""
    if level not in LEVELS:
        raise SandboxError(
            f"hardening must be one of {', '.join(LEVELS)}, not {level!r}", EXIT_CONFIG
        )
    # brokered keeps the standard filter: its command server makes a user namespace
    # per command, which harsh's filter refuses (the agent's own domain forbids mounts).
    return tuple(r for r in RULES if (r.level == "standard" or level == "harsh")
                 and r.unless not in flags and (not r.when or r.when in flags))


def _compile(rows: tuple[Rule, ...], machine: str) -> bytes:
    return assemble(tuple(Refusal(getattr(row, machine), row.errno, row.args)
                          for row in rows), machine)


def build_filter(level: str, machine: str | None = None,
                 flags: tuple[str, ...] = ()) -> bytes:
    """The BPF program (struct sock_filter[]) for `level` on `machine` (default: this host)."""
    machine = machine or os.uname().machine
    if machine not in ARCHES:
        raise SandboxError(
            f"the seccomp layer has no system-call table for {machine}; "
            "supported: " + ", ".join(ARCHES),
            EXIT_UNAVAILABLE,
        )
    return _compile(rules_for(level, flags), machine)


def filter_fd(level: str, flags: tuple[str, ...] = ()) -> int:
    """A memfd holding the program, for `bwrap --seccomp FD` (bwrap reads it to EOF)."""
    return data_descriptor("seccomp", build_filter(level, flags=flags))


def condition(test: ArgTest | ArgNotIn) -> str:
    """A row's argument test as explain prints it."""
    masked = f"arg{test.index}" if test.mask == 0xFFFFFFFF else f"arg{test.index}&{test.mask:#x}"
    if isinstance(test, ArgNotIn):
        return f"{masked} not in {{{', '.join(str(v) for v in test.values)}}}"
    return f"{masked}=={test.value:#x}"


def describe(level: str, flags: tuple[str, ...] = ()) -> list[str]:
    """Lines for `claude-sandbox explain` / `doctor`."""
    lines = [f"seccomp ({level}): foreign ABIs (i386, x32, arm32) kill the process"]
    for row in rules_for(level, flags):
        test = f" when {' and '.join(condition(a) for a in row.args)}" if row.args else ""
        lines.append(f"  {row.name}{test} -> {errorcode[row.errno]}: {row.why}")
    if level == "standard":
        lines.append("  nested user namespaces allowed (agents build their own sandbox)")
    return lines
