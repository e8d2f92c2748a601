"""core/libc.py: libc's functions through _ctypes, called as ctypes calls them."""

from __future__ import annotations

import _socket
import ctypes
import errno
import mmap
import os
import subprocess
import sys

import pytest

from claude_sandbox.core import libc

PR_GET_CHILD_SUBREAPER = 37
PR_GET_DUMPABLE = 3
SYS_MMAP, SYS_MUNMAP = (9, 11) if os.uname().machine == "x86_64" else (222, 215)


def test_a_call_returns_its_int_and_writes_through_a_pointer() -> None:
    value = libc.c_int(-1)
    assert libc.load_libc().prctl(PR_GET_CHILD_SUBREAPER, libc.byref(value), 0, 0, 0) == 0
    assert value.value in (0, 1)
    assert libc.load_libc().prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) in (0, 1, 2)


def test_a_failed_call_keeps_its_errno() -> None:
    assert libc.load_libc().prctl(0x7FFF_FFFF, 0, 0, 0, 0) == -1
    assert libc.get_errno() == errno.EINVAL
    assert libc.load_libc().unshare(-1) == -1
    assert libc.get_errno() == errno.EINVAL


def test_syscall_returns_a_long() -> None:
    """An address above 4 GiB comes back whole: syscall's result is a long, not an int."""
    address = libc.load_libc().syscall(SYS_MMAP, 0, 4096, mmap.PROT_READ,
                                       mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    try:
        assert address > 0xFFFF_FFFF
    finally:
        # An int argument goes as a C int (as ctypes sends it): the address as a long.
        assert libc.load_libc().syscall(SYS_MUNMAP, libc.c_ulong(address), 4096) == 0


def test_a_buffer_goes_in_and_comes_back() -> None:
    """getsockopt with a length in and out, as the packet filter's read-back asks."""
    buffer = libc.string_buffer(b"\xff" * 2, 8)
    assert buffer.raw == b"\xff\xff" + bytes(6)
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        length = libc.c_uint32(8)
        assert libc.load_libc().getsockopt(sock.fileno(), _socket.SOL_SOCKET, _socket.SO_TYPE,
                                           buffer, libc.byref(length)) == 0
        assert length.value == 4
        assert int.from_bytes(buffer.raw[:4], sys.byteorder) == _socket.SOCK_DGRAM
    finally:
        sock.close()
    with pytest.raises(ValueError):
        libc.string_buffer(b"123456789", 8)


def test_its_types_are_ctypes_types() -> None:
    """A structure of these types lays out as ctypes' own; a value of ctypes' own goes to
    a function of this module (the Python inner stage's Landlock passes them)."""

    class Prog(libc.Structure):
        _fields_ = (("len", libc.c_ushort), ("filter", libc.c_void_p))

    class CtypesProg(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    assert libc.sizeof(Prog) == ctypes.sizeof(CtypesProg) == 16
    for ours, theirs in ((libc.c_int, ctypes.c_int), (libc.c_uint32, ctypes.c_uint32),
                         (libc.c_long, ctypes.c_long), (libc.c_ulong, ctypes.c_ulong),
                         (libc.c_uint64, ctypes.c_uint64), (libc.c_char_p, ctypes.c_char_p)):
        assert libc.sizeof(ours) == ctypes.sizeof(theirs)
    value = ctypes.c_int(-1)
    assert libc.load_libc().prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) == 0
    assert value.value in (0, 1)
    pid = libc.load_libc().syscall(ctypes.c_long(39 if os.uname().machine == "x86_64" else 172))
    assert pid == os.getpid()


def test_no_symbol_no_function() -> None:
    with pytest.raises(AttributeError):
        libc.load_libc().no_such_function_in_libc  # noqa: B018
    with pytest.raises(AttributeError):
        libc.load_libc().__deepcopy__  # noqa: B018


def test_it_does_not_import_ctypes() -> None:
    """What it is for: the launcher calls libc without ctypes' import (ADR 0004)."""
    top = os.path.dirname(os.path.dirname(os.path.dirname(libc.__file__)))
    probe = (f"import sys; sys.path.insert(0, {top!r}); from claude_sandbox.core import libc; "
             "libc.load_libc().getpid(); "
             "print(sorted(m for m in ('ctypes', 'struct', 'types') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "[]"
