"""The one classic-BPF assembler for seccomp filters: rows in, a `sock_filter[]` out.

Two filters are built with it: the sandbox's (launch/planner/seccomp.py, loaded by bwrap) and,
under `hardening = brokered`, the agent's own, stacked on it (inside/agentside.py).
A row refuses one system call with an errno, optionally only when its arguments
match masks, or fall outside a short list. Everything not named is allowed, and a
foreign ABI is killed: the rows are written in the native numbering, so an i386
`int 0x80` or an x32 call (nr | 0x40000000) would dodge every row if it were merely
allowed through.

No imports beyond the byte packing: the inner stage loads the agent's filter.
"""

from __future__ import annotations

import _struct as struct  # struct.py only re-exports it: a module less to find (ADR 0004)

from claude_sandbox.core.record import record

# linux/seccomp.h return values.
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# linux/audit.h: EM_* | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
AUDIT_ARCH_ARM = 0x40000028
X32_SYSCALL_BIT = 0x40000000
# The native audit arch of each machine; every other (i386 on x86_64, arm32 on
# aarch64) is killed.
ARCHES = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARGS = 16

# Classic BPF opcodes (linux/bpf_common.h), only those the assembler emits.
_LD_W_ABS = 0x20
_ALU_AND_K = 0x54
_JMP_JEQ_K = 0x15
_JMP_JGE_K = 0x35
_RET_K = 0x06
_MAX_INSNS = 4096  # BPF_MAXINSNS


@record
class ArgTest:
    """`(low 32 bits of args[index]) & mask == value`.

    Only the low word is compared, on purpose: the kernel truncates an ioctl
    request to `unsigned int`, clone's flags and send's flags to their lower 32
    bits, so a caller who sets junk in the high word still gets TIOCSTI. A full
    64-bit compare (libseccomp's default) would let that junk through (measured).
    """

    index: int
    mask: int
    value: int


@record
class ArgNotIn:
    """`(low 32 bits of args[index]) & mask` is none of `values`: a row that refuses by
    class, everything but a short allow-list (socket's address families, types and
    protocols)."""

    index: int
    values: tuple[int, ...]
    mask: int = 0xFFFFFFFF


@record
class Refusal:
    """One row of a filter, in one machine's numbering: refuse `nr` with `errno` when
    every test of `args` matches (always, when there is none)."""

    nr: int
    errno: int
    args: tuple[ArgTest | ArgNotIn, ...] = ()


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _test(test: ArgTest | ArgNotIn, skip: int) -> list[bytes]:
    """Load one argument and compare it; on a mismatch jump `skip` instructions on."""
    found = [_insn(_LD_W_ABS, 0, 0, _OFF_ARGS + 8 * test.index)]
    if test.mask != 0xFFFFFFFF:
        found.append(_insn(_ALU_AND_K, 0, 0, test.mask))
    if isinstance(test, ArgNotIn):
        # A value in the list is the mismatch: jump past the list's other compares too.
        count = len(test.values)
        return found + [_insn(_JMP_JEQ_K, count - 1 - at + skip, 0, value)
                        for at, value in enumerate(test.values)]
    found.append(_insn(_JMP_JEQ_K, 0, skip, test.value))
    return found


def _size(test: ArgTest | ArgNotIn) -> int:
    loads = 1 if test.mask == 0xFFFFFFFF else 2
    return loads + (len(test.values) if isinstance(test, ArgNotIn) else 1)


def _syscall_block(nr: int, rows: list[Refusal]) -> list[bytes]:
    """Instructions for one syscall; A holds the syscall number on entry.

    A plain row returns at once. Argument rows load their arguments (which clobbers
    A), so once the number has matched the block ends in ALLOW: no other row can name
    the same number, `assemble` groups them. A row's tests must all match: each
    mismatch jumps past the rest of that row.
    """
    plain = [r for r in rows if not r.args]
    if plain:
        return [_insn(_JMP_JEQ_K, 0, 1, nr), _insn(_RET_K, 0, 0, RET_ERRNO | plain[0].errno)]
    body: list[bytes] = []
    for row in rows:
        for at, test in enumerate(row.args):
            rest = sum(_size(t) for t in row.args[at + 1:]) + 1  # the later tests, the RET
            body += _test(test, rest)
        body.append(_insn(_RET_K, 0, 0, RET_ERRNO | row.errno))
    body.append(_insn(_RET_K, 0, 0, RET_ALLOW))
    return [_insn(_JMP_JEQ_K, 0, len(body), nr), *body]


def assemble(rows: tuple[Refusal, ...], machine: str) -> bytes:
    """The program for `rows` on `machine` (a key of ARCHES)."""
    groups: dict[int, list[Refusal]] = {}
    for row in rows:
        groups.setdefault(row.nr, []).append(row)
    prog = [
        _insn(_LD_W_ABS, 0, 0, _OFF_ARCH),
        _insn(_JMP_JEQ_K, 1, 0, ARCHES[machine]),
        _insn(_RET_K, 0, 0, RET_KILL_PROCESS),  # i386, arm32, anything else
        _insn(_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if machine == "x86_64":
        # x32 shares the x86_64 audit arch and is told apart only by bit 30
        # of the number. nr -1 (0xffffffff) is let through as libseccomp
        # does: the kernel answers it with ENOSYS and nothing runs.
        prog += [
            _insn(_JMP_JGE_K, 0, 2, X32_SYSCALL_BIT),
            _insn(_JMP_JEQ_K, 1, 0, 0xFFFFFFFF),
            _insn(_RET_K, 0, 0, RET_KILL_PROCESS),
        ]
    for nr, group in groups.items():
        prog += _syscall_block(nr, group)
    prog.append(_insn(_RET_K, 0, 0, RET_ALLOW))
    if len(prog) > _MAX_INSNS:
        raise AssertionError("seccomp program too long")
    return b"".join(prog)


def load(program: bytes) -> bool:
    """Stack `program` on this thread's filters (no_new_privs must be set already, as
    bwrap leaves it); whether the kernel took it. Every thread started after it and
    every child inherits it."""
    from claude_sandbox.core.libc import (
        Structure,
        addressof,
        byref,
        c_ushort,
        c_void_p,
        load_libc,
        string_buffer,
    )

    buffer = string_buffer(program, len(program))

    class _Prog(Structure):
        _fields_ = (("len", c_ushort), ("filter", c_void_p))

    prog = _Prog(len(program) // 8, addressof(buffer))
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    return bool(load_libc().prctl(pr_set_seccomp, seccomp_mode_filter, byref(prog), 0,
                                  0) == 0)
