"""The pure-Python seccomp filter against an oracle built with libseccomp.

The two programs are laid out differently (libseccomp sorts by priority and
adds its own checks), so instead of comparing bytes we run both through a
small classic-BPF interpreter and require the same verdict for every input
that matters: every syscall number 0..1023 on x86_64 (and aarch64), i386 and
x32 calls, and the argument tests with and without junk in the high 32 bits.
"""

from __future__ import annotations

import operator
import os
import struct
import tempfile
import time
from collections.abc import Callable, Iterator

import pyseccomp as sc
import pytest

from claude_sandbox.core import bpf
from claude_sandbox.core.errors import SandboxError
from claude_sandbox.launch.planner import seccomp

# ---------------------------------------------------------------- interpreter
# Classic BPF as seccomp accepts it (kernel/seccomp.c seccomp_check_filter).
_BPF_CLASS = 0x07
_LD, _LDX, _ST, _STX, _ALU, _JMP, _RET, _MISC = range(8)


_ALU_OPS: dict[int, Callable[[int, int], int]] = {
    0x00: operator.add,
    0x10: operator.sub,
    0x20: operator.mul,
    0x30: operator.floordiv,
    0x40: operator.or_,
    0x50: operator.and_,
    0x60: operator.lshift,
    0x70: operator.rshift,
    0x80: lambda a, _: -a,
    0x90: operator.mod,
    0xA0: operator.xor,
}


def run_bpf(program: bytes, data: bytes) -> int:
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    a = x = 0
    mem = [0] * 16
    pc = 0
    for _ in range(10_000):
        code, jt, jf, k = insns[pc]
        cls = code & _BPF_CLASS
        pc += 1
        if cls == _LD:
            mode = code & 0xE0
            if mode == 0x20:  # ABS, word
                assert code & 0x18 == 0, "seccomp only allows 32-bit loads"
                (a,) = struct.unpack_from("<I", data, k)
            elif mode == 0x00:  # IMM
                a = k
            elif mode == 0x60:  # MEM
                a = mem[k]
            elif mode == 0x80:  # LEN
                a = len(data)
            else:
                raise AssertionError(f"bad ld {code:#x}")
        elif cls == _LDX:
            mode = code & 0xE0
            x = {0x00: k, 0x60: mem[k] if k < 16 else 0, 0x80: len(data)}[mode]
        elif cls == _ST:
            mem[k] = a
        elif cls == _STX:
            mem[k] = x
        elif cls == _ALU:
            op = code & 0xF0
            src = x if code & 0x08 else k
            a = _ALU_OPS[op](a, src) & 0xFFFFFFFF
        elif cls == _JMP:
            op = code & 0xF0
            src = x if code & 0x08 else k
            if op == 0x00:
                pc += k
                continue
            taken = {
                0x10: a == src,
                0x20: a > src,
                0x30: a >= src,
                0x40: (a & src) != 0,
            }[op]
            pc += jt if taken else jf
        elif cls == _RET:
            return a if code & 0x18 == 0x10 else k
        elif cls == _MISC:
            if code == 0x07:
                x = a
            else:
                a = x
    raise AssertionError("program did not return")


def seccomp_data(nr: int, arch: int, args: tuple[int, ...] = ()) -> bytes:
    padded = (*args, *([0] * (6 - len(args))))
    return struct.pack("<iIQ6Q", nr - (1 << 32) if nr >= 1 << 31 else nr, arch, 0, *padded)


# --------------------------------------------------------------------- oracle
_ORACLE_ARCH = {"x86_64": sc.Arch.X86_64, "aarch64": sc.Arch.AARCH64}


def oracle(level: str, machine: str) -> bytes:
    """The same policy written for libseccomp, exported as BPF."""
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    if machine != os.uname().machine:
        f.add_arch(_ORACLE_ARCH[machine])
        f.remove_arch(sc.Arch.NATIVE)
    f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    eperm, enosys = sc.ERRNO(1), sc.ERRNO(38)
    plain = [
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "pidfd_getfd",
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "request_key",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "open_by_handle_at",
    ]
    for name in plain:
        f.add_rule(eperm, name)
    # MASKED_EQ with a 32-bit mask: libseccomp's way of ignoring the high word.
    for request in (0x5412, 0x541C):
        f.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    # Every address family but unix, IP, netlink and vsock (refused on its own row).
    eafnosupport = sc.ERRNO(97)
    for call in ("socket", "socketpair"):
        for family in range(64):
            if family not in seccomp.FAMILIES:
                f.add_rule(eafnosupport, call, sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, family))
        f.add_rule(eafnosupport, call, sc.Arg(0, sc.GE, 64))
    f.add_rule(eperm, "socket", sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, seccomp.AF_VSOCK))
    if level == "harsh":
        for name in ("unshare", "clone"):
            f.add_rule(eperm, name, sc.Arg(0, sc.MASKED_EQ, 0x10000000, 0x10000000))
        f.add_rule(enosys, "clone3")
        f.add_rule(enosys, "memfd_create")
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def cases(machine: str) -> Iterator[tuple[int, int, tuple[int, ...]]]:
    native = {"x86_64": bpf.AUDIT_ARCH_X86_64, "aarch64": bpf.AUDIT_ARCH_AARCH64}[machine]
    junk = 0xDEADBEEF00000000
    for nr in range(1024):
        yield nr, native, ()
        yield nr, native, (0xFFFFFFFFFFFFFFFF,) * 6
    ioctl = {"x86_64": 16, "aarch64": 29}[machine]
    for request in (0x5412, 0x541C, 0x5413, 0x5411, 0, 0x541B, 0x5412 | 0x1000000):
        for high in (0, junk, 0xFFFFFFFF00000000, 1 << 32):
            yield ioctl, native, (0, request | high)
            yield ioctl, native, (request | high, 0)
    clone, unshare = {"x86_64": (56, 272), "aarch64": (220, 97)}[machine]
    for nr in (clone, unshare):
        for flags in (0, 0x10000000, 0x10000000 | 0x11, 0x20000000, 0x10000000 | junk, junk):
            yield nr, native, (flags,)
    if machine == "x86_64":
        for nr in (0, 1, 16, 101, 59, 0x200, 0x3FFFFFFF):
            yield nr | bpf.X32_SYSCALL_BIT, native, ()
        yield 0xFFFFFFFF, native, ()  # nr -1 (the "skipped by a tracer" number)
        foreign = (bpf.AUDIT_ARCH_I386,)
    else:
        foreign = (bpf.AUDIT_ARCH_ARM,)
    for arch in (
        *foreign,
        0,
        0xFFFFFFFF,
        bpf.AUDIT_ARCH_AARCH64 if machine == "x86_64" else bpf.AUDIT_ARCH_X86_64,
    ):
        for nr in (0, 1, 11, 26, 54, 120, 0x40000000):
            yield nr, arch, ()


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
@pytest.mark.parametrize("level", ["standard", "harsh"])
def test_verdicts_equal_libseccomp(level: str, machine: str) -> None:
    ours = seccomp.build_filter(level, machine)
    theirs = oracle(level, machine)
    mismatches = []
    for nr, arch, args in cases(machine):
        data = seccomp_data(nr, arch, args)
        if run_bpf(ours, data) != run_bpf(theirs, data):
            mismatches.append((hex(nr), hex(arch), [hex(a) for a in args]))
    assert not mismatches, mismatches[:20]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_table_numbers_match_libseccomp(machine: str) -> None:
    arch = _ORACLE_ARCH[machine]
    wrong = [
        (row.name, getattr(row, machine), sc.resolve_syscall(arch, row.name))
        for row in seccomp.RULES
        if sc.resolve_syscall(arch, row.name) != getattr(row, machine)
    ]
    assert not wrong


def test_expected_verdicts_spelled_out() -> None:
    """Independent of the oracle: the verdicts the issue asks for."""
    prog = seccomp.build_filter("standard", "x86_64")
    x86 = bpf.AUDIT_ARCH_X86_64

    def verdict(nr: int, *args: int, arch: int = x86) -> int:
        return run_bpf(prog, seccomp_data(nr, arch, args))

    eperm = bpf.RET_ERRNO | 1
    assert verdict(101) == eperm  # ptrace
    assert verdict(16, 0, 0x5412) == eperm
    assert verdict(16, 0, 0xFFFFFFFF_00005412) == eperm  # junk in the high word
    assert verdict(16, 0, 0x1_0000541C) == eperm
    assert verdict(16, 0, 0x5413) == bpf.RET_ALLOW  # TIOCGWINSZ
    assert verdict(0) == bpf.RET_ALLOW
    assert verdict(272, 0x10000000) == bpf.RET_ALLOW  # nested userns in standard
    assert verdict(435) == bpf.RET_ALLOW
    assert verdict(11, arch=bpf.AUDIT_ARCH_I386) == bpf.RET_KILL_PROCESS
    assert verdict(0x40000001) == bpf.RET_KILL_PROCESS
    harsh = seccomp.build_filter("harsh", "x86_64")
    assert run_bpf(harsh, seccomp_data(272, x86, (0x10000000,))) == eperm
    assert run_bpf(harsh, seccomp_data(56, x86, (0x10000011,))) == eperm
    assert run_bpf(harsh, seccomp_data(56, x86, (0x01200011,))) == bpf.RET_ALLOW  # fork
    assert run_bpf(harsh, seccomp_data(435, x86)) == bpf.RET_ERRNO | 38


def test_unknown_level_and_arch_are_named_errors() -> None:
    with pytest.raises(SandboxError, match="hardening"):
        seccomp.build_filter("paranoid", "x86_64")
    with pytest.raises(SandboxError, match="riscv64"):
        seccomp.build_filter("standard", "riscv64")


def test_build_cost_under_a_millisecond() -> None:
    start = time.perf_counter()
    for _ in range(100):
        seccomp.build_filter("harsh", "x86_64")
    assert (time.perf_counter() - start) / 100 < 0.001


def test_filter_fd_holds_the_program() -> None:
    fd = seccomp.filter_fd("standard")
    try:
        # Close-on-exec: only the child it is passed to (fork_exec's pass_fds, the jail
        # holder) inherits it, never another program the launcher starts.
        assert not os.get_inheritable(fd)
        assert os.read(fd, 1 << 16) == seccomp.build_filter("standard")
    finally:
        os.close(fd)


def test_describe_names_every_row() -> None:
    text = "\n".join(seccomp.describe("harsh", (seccomp.MEMORY_PER_PROCESS,)))
    for row in seccomp.RULES:
        assert row.name in text


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
@pytest.mark.parametrize("flags", [(), ("allow-vsock",)])
def test_sockets_of_other_address_families_are_refused_by_class(
        machine: str, flags: tuple[str, ...]) -> None:
    prog = seccomp.build_filter("standard", machine, flags)
    arch = bpf.ARCHES[machine]
    socket_nr, pair_nr = {"x86_64": (41, 53), "aarch64": (198, 199)}[machine]

    def verdict(nr: int, family: int) -> int:
        return run_bpf(prog, seccomp_data(nr, arch, (family, 1, 0)))

    for family in (1, 2, 10, 16, 2 | (0xDEAD << 32)):  # the kernel reads an int
        assert verdict(socket_nr, family) == bpf.RET_ALLOW
    for family in (1, 1 | (0xDEAD << 32)):  # a pair: unix's alone
        assert verdict(pair_nr, family) == bpf.RET_ALLOW
    for family in (2, 10, 16):
        assert verdict(pair_nr, family) == bpf.RET_ERRNO | 97
    # AF_UNSPEC, PACKET, ALG, BLUETOOTH, QIPCRTR, TIPC, RDS, KCM, XDP, MCTP, past AF_MAX
    for family in (0, 17, 38, 31, 42, 30, 21, 41, 44, 45, 46, 0xFFFFFFFF):
        assert verdict(socket_nr, family) == bpf.RET_ERRNO | 97, family
        assert verdict(pair_nr, family) == bpf.RET_ERRNO | 97, family
    vsock = bpf.RET_ALLOW if flags else bpf.RET_ERRNO | 1
    assert verdict(socket_nr, seccomp.AF_VSOCK) == vsock
    assert run_bpf(prog, seccomp_data(pair_nr, arch, (seccomp.AF_VSOCK, 1, 0))) \
        == bpf.RET_ERRNO | 97  # a pair is unix's alone, allow-vsock or not


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_ip_and_netlink_sockets_are_refused_by_type_and_protocol(machine: str) -> None:
    prog = seccomp.build_filter("standard", machine)
    arch = bpf.ARCHES[machine]
    nr = {"x86_64": 41, "aarch64": 198}[machine]

    def verdict(family: int, kind: int, protocol: int = 0) -> int:
        return run_bpf(prog, seccomp_data(nr, arch, (family, kind, protocol)))

    nonblock_cloexec = 0o4000 | 0o2000000
    for family in (2, 10):
        for kind in (1, 2, 3, 1 | nonblock_cloexec, 2 | (0xBAD << 32)):
            assert verdict(family, kind) == bpf.RET_ALLOW, (family, kind)
        for protocol in (6, 17, 1, 58, 6 | (7 << 32)):
            assert verdict(family, 1, protocol) == bpf.RET_ALLOW, protocol
        # SOCK_PACKET (the kernel turns AF_INET into AF_PACKET), SEQPACKET (SCTP), DCCP
        for kind in (10, 5, 6, 10 | nonblock_cloexec, 4):
            assert verdict(family, kind) == bpf.RET_ERRNO | 94, (family, kind)
        for protocol in (132, 256, 115, 33, 262, 136, 255):  # SCTP SMC L2TP DCCP MPTCP ...
            assert verdict(family, 1, protocol) == bpf.RET_ERRNO | 93, protocol
    for protocol in (0, 4, 15):  # routes, diagnostics, uevents
        assert verdict(16, 3, protocol) == bpf.RET_ALLOW, protocol
    for protocol in (16, 12, 6, 9, 10):  # generic (TIPC), nf_tables, xfrm, audit
        assert verdict(16, 3, protocol) == bpf.RET_ERRNO | 93, protocol
    assert verdict(1, 5, 0) == bpf.RET_ALLOW  # a unix seqpacket socket


def test_vsock_is_refused_unless_the_operator_allows_it() -> None:
    names = [(r.name, getattr(r.args[-1], "value", None) if r.args else None)
             for r in seccomp.rules_for("standard")]
    assert ("socket", seccomp.AF_VSOCK) in names
    for level in ("standard", "harsh", "brokered"):
        allowed = seccomp.rules_for(level, ("allow-vsock",))
        assert all(r.unless != "allow-vsock" for r in allowed)
        assert len(allowed) == len(seccomp.rules_for(level)) - 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_brokered_agents_own_filter(machine: str) -> None:
    """memfd_create, the stream protocols Landlock's port rules do not see (by protocol
    or by type), and TCP Fast Open's connect-in-send are refused in the agent's own
    process; plain TCP and a Unix seqpacket socket are not."""
    from claude_sandbox.inside import agentside

    prog = agentside.agent_filter(machine)
    arch = bpf.ARCHES[machine]
    nr = {name: (x86 if machine == "x86_64" else arm)
          for name, x86, arm, _, _ in agentside.AGENT_RULES}

    def verdict(call: str, *args: int) -> int:
        return run_bpf(prog, seccomp_data(nr[call], arch, args))

    assert verdict("memfd_create") == bpf.RET_ERRNO | 38
    for protocol in (262, 132, 33, 262 | (7 << 32)):  # junk in the high word changes nothing
        assert verdict("socket", 2, 1, protocol) == bpf.RET_ERRNO | 93
    assert verdict("socket", 2, 1, 6) == bpf.RET_ALLOW
    assert verdict("socket", 2, 1, 0) == bpf.RET_ALLOW
    for family in (2, 10):  # SCTP and DCCP by an IP socket's type, flags in the high bits
        assert verdict("socket", family, 5 | 0o2000000, 0) == bpf.RET_ERRNO | 93
        assert verdict("socket", family, 6, 0) == bpf.RET_ERRNO | 93
    assert verdict("socket", 1, 5, 0) == bpf.RET_ALLOW  # AF_UNIX SOCK_SEQPACKET
    fastopen = 0x20000000
    assert verdict("sendto", 3, 0, 10, fastopen | 0x40) == bpf.RET_ERRNO | 95
    assert verdict("sendmsg", 3, 0, fastopen) == bpf.RET_ERRNO | 95
    assert verdict("sendmmsg", 3, 0, 1, fastopen) == bpf.RET_ERRNO | 95
    assert verdict("sendto", 3, 0, 10, 0x40) == bpf.RET_ALLOW  # MSG_DONTWAIT alone
    assert run_bpf(prog, seccomp_data(0, bpf.AUDIT_ARCH_I386)) == bpf.RET_KILL_PROCESS


def test_memfd_is_refused_where_max_memory_holds_per_process_and_under_harsh() -> None:
    def names(flags: tuple[str, ...], level: str = "standard") -> list[str]:
        return [r.name for r in seccomp.rules_for(level, flags)]

    assert "memfd_create" not in names(())
    assert "memfd_create" in names((seccomp.MEMORY_PER_PROCESS,))
    assert "memfd_create" in names((), "harsh")  # a program written to memory (A68)
    prog = seccomp.build_filter("standard", "x86_64", (seccomp.MEMORY_PER_PROCESS,))
    assert run_bpf(prog, seccomp_data(319, bpf.AUDIT_ARCH_X86_64)) == bpf.RET_ERRNO | 38
