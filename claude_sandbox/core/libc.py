"""libc's functions for the launch path, through `_ctypes`, the C half of ctypes.

The launch calls a handful of libc's functions that no standard module offers (prctl,
unshare, setns, mount, getsockopt, syscall). The `ctypes` package would do it, but its
import defines some forty C types in Python and their byte-order variants, and imports
`types`: 1.3 to 2 ms of the launcher's start at every launch, beside the 0.4 to 0.7 ms
of `_ctypes` itself (`-X importtime`; docs/adr/0004-launch-cost.md), and a cost the
holder and the egress proxy inherit as forks. The types below are the ones the launch
path passes, made as `ctypes` makes them (a `_type_` code on `_ctypes`'s own base), so
a value of either kind goes to a function of either kind.

Calls convert their arguments as `ctypes` does without `argtypes`: an int to a C int,
bytes to a `char *`, None to NULL, a `byref()` to a pointer. Every function keeps errno
for `get_errno()` (ctypes' `use_errno`); each returns a C int, `syscall` a long.
"""

from __future__ import annotations

import _ctypes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ctypes import Array
    from typing import Any

__all__ = ["Structure", "addressof", "byref", "c_char", "c_char_p", "c_int", "c_long",
           "c_uint32", "c_uint64", "c_ulong", "c_ushort", "c_void_p", "get_errno",
           "load_libc", "sizeof", "string_buffer"]

byref = _ctypes.byref
addressof = _ctypes.addressof
sizeof = _ctypes.sizeof
get_errno = _ctypes.get_errno
Structure = _ctypes.Structure


if TYPE_CHECKING:  # the same types, as typeshed describes ctypes' own
    from ctypes import (
        c_char,
        c_char_p,
        c_int,
        c_long,
        c_uint32,
        c_uint64,
        c_ulong,
        c_ushort,
        c_void_p,
    )
else:
    def _simple(name: str, code: str) -> type:
        """A C type as ctypes makes it: its `_type_` code (the struct module's; on
        Linux's LP64 a long is 64 bits) on `_ctypes`'s base."""
        return type(name, (_ctypes._SimpleCData,), {"_type_": code, "__module__": __name__})

    c_char, c_char_p, c_void_p = (_simple("c_char", "c"), _simple("c_char_p", "z"),
                                  _simple("c_void_p", "P"))
    c_ushort, c_int, c_uint32 = (_simple("c_ushort", "H"), _simple("c_int", "i"),
                                 _simple("c_uint32", "I"))
    c_long, c_ulong, c_uint64 = (_simple("c_long", "l"), _simple("c_ulong", "L"),
                                 _simple("c_uint64", "Q"))


def string_buffer(data: bytes, size: int) -> Array[c_char]:
    """A writable `char[size]` holding `data` at its start, zeros after it
    (`ctypes.create_string_buffer`); its bytes are `.raw`."""
    buffer = (c_char * size)()
    buffer.raw = data.ljust(size, b"\0")  # refused when longer than `size`, as ctypes does
    return buffer


# The function types: cdecl, errno kept. The metaclass reads both attributes from the
# class's own namespace, never from a base.
_FLAGS = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO


class _Function(_ctypes.CFuncPtr):
    _flags_ = _FLAGS
    _restype_ = c_int


class _LongFunction(_ctypes.CFuncPtr):
    _flags_ = _FLAGS
    _restype_ = c_long


class _Libc:
    """This process's own symbols (dlopen(NULL)), libc's among them; a function is
    looked up on first use and kept, so that its `argtypes`, once set, stay."""

    def __init__(self) -> None:
        self._handle = _ctypes.dlopen(None, 0)  # type: ignore[arg-type]  # as ctypes.CDLL(None)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # no libc symbol for a protocol's probe
        kind = _LongFunction if name == "syscall" else _Function
        function = kind((name, self))  # type: ignore[arg-type]  # what CDLL passes
        setattr(self, name, function)
        return function


_LIBC: _Libc | None = None


def load_libc() -> Any:
    """libc, loaded once, errno kept: the one way the package calls it."""
    global _LIBC
    if _LIBC is None:
        _LIBC = _Libc()
    return _LIBC
