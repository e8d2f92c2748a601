"""Frozen records for the launch path, without importing dataclasses.

`dataclasses` imports `inspect` (and with it ast, dis, tokenize, ...): about
20 ms at every launch on this machine, more than everything else the launcher
does before bwrap starts (bench/bench_launch.py). A record gives the launch
path what it used from dataclasses: annotated fields in order, `__slots__`,
positional or keyword construction with defaults, equality, hashing, a repr,
and no assignment after construction. The operator tools, which do not run at
every launch, keep using dataclasses.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")
else:

    def dataclass_transform(**_options: object) -> object:
        return lambda function: function


_RESERVED = ("__dict__", "__weakref__", "__annotations__")


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    """Turn a class with annotated fields into a frozen, slotted record."""
    # Not inspect.get_annotations: importing inspect is the cost this module avoids.
    annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
    names = tuple(annotations)
    defaults = {name: cls.__dict__[name] for name in names if name in cls.__dict__}
    namespace = {
        key: value for key, value in cls.__dict__.items()
        if key not in names and key not in _RESERVED
    }
    namespace.update(
        __slots__=names,
        __init__=_make_init(cls.__name__, names, defaults),
        __setattr__=_refuse_setattr,
        __delattr__=_refuse_delattr,
        __eq__=_eq,
        __hash__=_hash,
        __repr__=_repr,
        _fields=names,
        __annotations__=annotations,
    )
    made = type(cls.__name__, cls.__bases__, namespace)
    made.__qualname__ = cls.__qualname__
    made.__module__ = cls.__module__
    return made


def _make_init(name: str, names: tuple[str, ...], defaults: dict[str, Any]) -> Callable[..., None]:
    def __init__(self: object, *args: object, **kwargs: object) -> None:
        if len(args) > len(names):
            raise TypeError(f"{name}() takes {len(names)} arguments, {len(args)} given")
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names or key in values:
                raise TypeError(f"{name}() got an unexpected or repeated argument {key!r}")
            values[key] = value
        for field in names:
            if field in values:
                value = values[field]
            elif field in defaults:
                value = defaults[field]
            else:
                raise TypeError(f"{name}() missing argument {field!r}")
            object.__setattr__(self, field, value)

    return __init__


def _values(self: object) -> tuple[object, ...]:
    return tuple(getattr(self, field) for field in self._fields)  # type: ignore[attr-defined]


def _eq(self: object, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented  # type: ignore[no-any-return]
    return _values(self) == _values(other)


def _hash(self: object) -> int:
    return hash((self.__class__.__name__, _values(self)))


def _repr(self: object) -> str:
    shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)  # type: ignore[attr-defined]
    return f"{self.__class__.__qualname__}({shown})"


def _refuse_setattr(self: object, name: str, value: object) -> None:
    raise AttributeError(f"{self.__class__.__name__} is frozen: cannot set {name}")


def _refuse_delattr(self: object, name: str) -> None:
    raise AttributeError(f"{self.__class__.__name__} is frozen: cannot delete {name}")


def replace(instance: T, **changes: object) -> T:
    """A copy of `instance` with some fields changed."""
    values = {f: getattr(instance, f) for f in instance._fields}  # type: ignore[attr-defined]
    values.update(changes)
    return instance.__class__(**values)
